"""``amplint verify``: the command-line half of the runtime verifier (wired by amplint/cli.py)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..argtypes import positive_int as _positive_int
from .records import plain

DESCRIPTION = """\
Run the model under the bundled AMP engine at O0 (the fp32 reference) and the selected opt
levels, and prove which static findings come true and whether each fix removes them.

WARNING: unlike `amplint check` and `amplint fix`, which only read source text, `verify`
IMPORTS AND RUNS YOUR CODE: the file of each PATH::FACTORY target is imported and FACTORY is
called, then the model is trained for a few steps.  Only verify code you trust.

A target is PATH::FACTORY: a callable in that file returning (model, example_inputs) (a tuple
of positional arguments or a dict of keyword arguments), or a model with an `example_inputs`
attribute.  With no targets, [tool.amplint.verify] `targets` in the nearest pyproject.toml are
used.  With --fix the suggested fixes are applied to TEMPORARY COPIES of the model's source
files (never to your files), which are imported and run again with the same seed.

Exit status: 0 safe; 1 a selected level crashes, produces inf/NaN or skips most training
steps (with --fix: after the fixes), or a fix changes fp32 results beyond --tolerance; 2 usage,
configuration or target errors."""

EXIT_OK, EXIT_UNSAFE, EXIT_ERROR = 0, 1, 2


def _levels_arg(value: str) -> list[str]:
    from .config import parse_levels

    try:
        return list(parse_levels(value)) or ["O0"]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _LevelsAction(argparse.Action):
    """``--opt-level O1 O2`` / ``O1,O2``; a PATH::FACTORY written after the levels is a target."""

    def __call__(self, parser, namespace, values, option_string=None):
        import re

        levels, extra = [], []
        for v in values:
            if re.fullmatch(r"\s*[oO0]?[0-3](\s*,\s*[oO0]?[0-3])*\s*,?\s*", v) or re.fullmatch(r"[A-Za-z]\d(,[A-Za-z]?\d)*", v):
                try:
                    levels.append(_levels_arg(v))
                except argparse.ArgumentTypeError as exc:
                    parser.error(f"argument --opt-level: {exc}")
            elif "::" in v or v.endswith(".py"):
                extra.append(v)
            else:
                parser.error(f"argument --opt-level: unknown opt level {v!r} (choose from O1 O2 O3; O0 is always the reference)")
        setattr(namespace, self.dest, (getattr(namespace, self.dest, None) or []) + levels)
        namespace.extra_targets = list(getattr(namespace, "extra_targets", None) or []) + extra


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not (x > 0 and math.isfinite(x)):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {value}")
    return x


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter  # keep DESCRIPTION's paragraphs and the warning
    p.add_argument("targets", nargs="*", metavar="PATH::FACTORY",
                   help="file and factory returning (model, example_inputs); default: [tool.amplint.verify] targets")
    lv = p.add_argument_group("what to run")
    lv.add_argument("--opt-level", dest="opt_level", nargs="+", action=_LevelsAction, metavar="LEVEL",
                    help="opt levels to check against O0 (always the fp32 reference): O1 O2 O3, as `O1 O2` or `O1,O2` (default O1 O2)")
    lv.add_argument("--dtype", choices=("fp16", "bf16"), help="low-precision dtype (default: the [tool.amplint] target of the target's file when fp16 or bf16, else fp16)")
    lv.add_argument("--target", choices=("amp", "fp8"), default="amp",
                    help="amp (default): the AMP engine's opt levels against fp32; fp8: bf16 against torchao fp8 "
                         "with the fp8-plan filter (needs the fp8 extra)")
    from amplint.fp8.cli import add_fp8_options

    add_fp8_options(lv)
    lv.add_argument("--device", choices=("auto", "cpu", "cuda"), help="where to run: auto (the default) is cuda when available, else cpu")
    lv.add_argument("--steps", type=_positive_int, metavar="N", help="training steps per level: forward, loss, backward through scale_loss, optimizer step (default 3)")
    lv.add_argument("--loss", metavar="SPEC", help="how to get a scalar from the output: auto (default: the output's 'loss' key or attribute, else "
                    "the first 0-d float tensor anywhere in it, else the mean of squares), mean, sum, square, first, "
                    "PATH::FUNC or module:func (called with (output, inputs)), or an expression over `out`, e.g. 'out.logits.float().mean()'")
    lv.add_argument("--seed", type=int, metavar="N", help="random seed for the model, inputs and dropout (default 0)")
    lv.add_argument("--tolerance", type=_positive_float, metavar="X",
                    help="max relative error against fp32, max|y-y32|/max|y32| (default 0.01 for fp16, 0.05 for bf16)")
    lv.add_argument("--optimizer", choices=("adamw", "adam", "sgd"), help="optimizer for the training steps (default adamw)")
    lv.add_argument("--lr", type=_positive_float, metavar="X", help="learning rate (default 1e-4)")
    lv.add_argument("--threads", type=_positive_int, metavar="N", help="CPU threads for torch (default: torch's default; "
                    "small models on a busy machine run much faster with 1)")
    lv.add_argument("--timeout", type=_positive_float, metavar="SECONDS", default=600.0,
                    help="stop with an error when one opt level (or the import and factory call) runs longer (default 600)")
    lv.add_argument("--no-trace", action="store_true", help="skip the per-source-line trace of step 0 (faster; findings are then matched by module only)")
    fx = p.add_argument_group("fixes")
    fx.add_argument("--fix", action="store_true", default=None, help="apply the suggested fixes to temporary copies of the sources and prove them")
    fx.add_argument("--unsafe-fixes", dest="unsafe_fixes", action="store_true", default=None, help="with --fix: also apply unsafe fixes")
    fx.add_argument("--no-lint", action="store_true", help="do not lint the model's sources (runtime measurements only)")
    out = p.add_argument_group("output")
    out.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    out.add_argument("--report", metavar="FILE.html", help="also write a self-contained HTML report (value ranges per module and level on a log scale)")
    out.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    out.add_argument("--config", metavar="FILE", help="read [tool.amplint] and [tool.amplint.verify] from this pyproject.toml")


class _Progress:
    """What verify is doing, on the terminal (stderr; never when stderr is not a terminal, or
    with --format json): the target, the opt level (and which of the run's levels it is), the
    training step, and a bar over all steps of the target.  Redrawn at every level and step,
    so short runs show them too; erased at the end (the report follows)."""

    def __init__(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        # a copy of the terminal's stderr: the model's own output is captured from fds 1 and 2
        # while it runs (capture.py), and the display must still reach the terminal
        self.stream = open(os.dup(sys.stderr.fileno()), "w", encoding="utf-8", closefd=True)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), TextColumn("{task.completed}/{task.total} steps"),
                            TimeElapsedColumn(), transient=True, console=Console(file=self.stream, force_terminal=True, highlight=False))
        self.task = self.bar.add_task("", total=1)
        self.started = False
        self.target, self.levels, self.steps, self.fix = "", [], 1, False
        self.level, self.level_index, self.step_index, self.fixed_copy = "", 0, 0, False

    def begin_target(self, target: str, levels: list, steps: int, fix: bool) -> None:
        self.target, self.levels, self.steps, self.fix = target, list(levels), steps, fix
        self.fixed_copy = False
        self.level = ""
        self.bar.reset(self.task, total=len(self.levels) * steps * (2 if fix else 1), completed=0)
        if not self.started:
            self.bar.start()
            self.started = True
        self.message("importing and building the model")

    def start_level(self, level: str) -> None:
        if level == self.levels[0] and self.level:  # the levels again: the fixed copies' run
            self.fixed_copy = True
        self.level, self.step_index = level, 0
        self.level_index = self.levels.index(level) + 1 if level in self.levels else 0
        self._show_step()

    def step(self) -> None:
        self.step_index += 1
        self.bar.advance(self.task)
        if self.step_index < self.steps:
            self._show_step()

    def message(self, text: str) -> None:
        self._show(f"{text}  [dim]{self.target}[/]")

    def _show_step(self) -> None:
        # level and step first: a narrow terminal cuts the end of the line
        copy = " (fixed copy)" if self.fixed_copy else ""
        self._show(f"[bold cyan]{self.level}[/] (level {self.level_index}/{len(self.levels)})  step {self.step_index + 1}/{self.steps}"
                   f"  [dim]{self.target}{copy}[/]")

    def _show(self, description: str) -> None:
        self.bar.update(self.task, description=description)
        self.bar.refresh()

    def stop(self) -> None:
        if self.started:
            self.bar.stop()
        self.stream.close()


def _options(args, defaults: dict, per_target: dict) -> dict:
    opts = {"levels": ("O1", "O2"), "dtype": None, "device": None, "steps": 3, "loss": "auto", "seed": 0,
            "tolerance": None, "optimizer": "adamw", "lr": 1e-4, "fix": False, "unsafe_fixes": False, "report": None}
    opts.update(defaults)
    opts.update(per_target)
    cli = {
        "levels": tuple(lvl for group in args.opt_level for lvl in group if lvl != "O0") if args.opt_level else None,
        "dtype": args.dtype, "device": args.device, "steps": args.steps, "loss": args.loss, "seed": args.seed,
        "tolerance": args.tolerance, "optimizer": args.optimizer, "lr": args.lr, "fix": args.fix,
        "unsafe_fixes": args.unsafe_fixes,
    }
    opts.update({k: v for k, v in cli.items() if v is not None})
    if opts["unsafe_fixes"] and args.fix is None and not opts["fix"]:
        opts["fix"] = True  # --unsafe-fixes implies --fix
    return opts


def main(args, lint_settings=None) -> int:
    """``lint_settings`` (:class:`lintfix.LintSettings`): how the model's sources are linted
    and fixed; ``fix --verify`` passes its own, so that the fixes proved are those it writes.
    Default: the configuration alone (``--config``)."""
    from amplint.config import ConfigError

    from . import config as vconfig

    try:
        pyproject = vconfig.find_pyproject(".", args.config)
        defaults, config_targets, base = vconfig.load(pyproject)
    except ConfigError as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.config and not os.path.isfile(args.config):
        print(f"amplint: error: --config {args.config}: no such file", file=sys.stderr)
        return EXIT_ERROR
    specs = list(args.targets or []) + list(getattr(args, "extra_targets", None) or [])
    if specs:
        targets = [(spec, {}, ".") for spec in specs]
    else:
        targets = [(spec, opts, base) for spec, opts in config_targets]
    if not targets:
        print("amplint: error: no targets: pass PATH::FACTORY, or list them under [tool.amplint.verify] targets "
              "in pyproject.toml", file=sys.stderr)
        return EXIT_ERROR

    from .target import Target, TargetError

    parsed = []
    for spec, per_target, where in targets:  # before importing torch: usage errors come fast
        try:
            parsed.append((Target.parse(spec, where or "."), per_target))
        except TargetError as exc:
            print(f"amplint: error: {exc}", file=sys.stderr)
            return EXIT_ERROR

    beacon = getattr(args, "verify_beacon", None)
    if beacon is None:  # the user's code runs in a child this process watches (verify/supervise.py)
        import importlib.util

        # found, not imported: the child forks before torch is imported, and without torch
        # the caller's one-line advice must come from this process, not from the target
        if importlib.util.find_spec("torch") is None:
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        from .supervise import supervise

        # resolved now: the factory may chdir
        report = args.report or vconfig.resolve_report_path(defaults.get("report"), base)
        args.report, args.report_shown = (os.path.abspath(report) if report else None), report
        label = ", ".join(str(t) for t, _ in parsed)

        def child(b) -> int:
            args.verify_beacon = b
            return main(args, lint_settings)

        return supervise(child, getattr(args, "timeout", None), label)

    import torch  # noqa: F401  (verify needs torch; imported only now)

    threads = args.threads or defaults.get("threads")
    if threads:
        torch.set_num_threads(threads)
    if args.target == "fp8":
        from amplint.fp8.cli import verify_main

        return verify_main(args, [t for t, _ in parsed], args.tolerance or 0.05)
    from .runner import keep_freed_memory, skip_dynamo_import

    skip_dynamo_import()
    keep_freed_memory()

    from .core import verify_target
    from .lintfix import LintSettings
    from .runner import RunConfig

    if lint_settings is None:
        lint_settings = LintSettings(config=args.config)
    reports: list = []  # VerifyReport
    status = EXIT_OK
    progress = None
    report_path = args.report or vconfig.resolve_report_path(defaults.get("report"), base)
    try:
        for target, per_target in parsed:
            opts = _options(args, defaults, per_target)
            if opts["device"] == "cuda" and not torch.cuda.is_available():
                print("amplint: error: --device cuda: CUDA is not available in this PyTorch build/machine", file=sys.stderr)
                return EXIT_ERROR
            device = None if opts["device"] in (None, "auto") else opts["device"]  # None: RunConfig picks cuda when available
            # the dtype the lint configuration gives the target's file (its [tool.amplint]
            # target), unless --dtype or [tool.amplint.verify] dtype says otherwise
            dtype = opts["dtype"] or lint_settings.target_of(target.path) or "fp16"
            cfg = RunConfig(levels=opts["levels"], dtype=dtype, device=device, steps=opts["steps"],
                            loss=opts["loss"], seed=opts["seed"], tolerance=opts["tolerance"], optimizer=opts["optimizer"],
                            lr=opts["lr"], census=not args.no_trace)
            if not args.quiet and args.format == "text" and sys.stderr.isatty() and progress is None:
                progress = _Progress()
            if progress is not None:
                progress.begin_target(str(target), cfg.all_levels(), cfg.steps, bool(opts["fix"]))
            try:
                report = verify_target(target, cfg, fix=opts["fix"], unsafe=opts["unsafe_fixes"], config=args.config,
                                       progress=beacon.wrap(progress), lint=not args.no_lint, lint_settings=lint_settings)
            except TargetError as exc:
                print(f"amplint: error: {exc}", file=sys.stderr)
                return EXIT_ERROR
            except (Exception, SystemExit) as exc:  # importing the target or calling the factory failed
                import traceback

                tb = traceback.extract_tb(exc.__traceback__)
                from .target import canonical

                where_ = next((f"{f.filename}:{f.lineno}: " for f in reversed(tb) if canonical(f.filename) == canonical(target.path)), "")
                print(f"amplint: error: {target}: {where_}{type(exc).__name__}: {exc}", file=sys.stderr)
                return EXIT_ERROR
            reports.append(report)
            status = max(status, report.exit_status)
    finally:
        if progress is not None:
            progress.stop()

    out = sys.stdout
    if args.format == "json":
        json.dump({"version": 1, "exit_status": status, "results": [_jsonable(plain(r)) for r in reports]}, out, indent=1,
                  default=str)
        out.write("\n")
    else:
        from .report_text import render

        color = out.isatty() and not os.environ.get("NO_COLOR")
        render(reports, out, color=color)
    if report_path:
        from .report_html import render as render_html

        try:
            with open(report_path, "w", encoding="utf-8") as fh:
                fh.write(render_html(reports))
        except OSError as exc:
            print(f"amplint: error: cannot write {report_path}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
        if args.format == "text":
            out.write(f"HTML report: {getattr(args, 'report_shown', None) or report_path}\n")
    out.flush()
    return status


def _jsonable(obj):
    """NaN/inf are not JSON: write them as strings."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_jsonable(v) for v in obj]
    return obj
