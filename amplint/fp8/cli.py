"""``amplint fp8-plan`` and ``amplint verify --target fp8`` (wired by amplint/cli.py and
amplint/verify/cli.py)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..argtypes import positive_int as _positive_int
from .gemm import RECIPES

EXIT_OK, EXIT_UNSAFE, EXIT_ERROR = 0, 1, 2

PLAN_DESCRIPTION = """\
For each nn.Linear of the model: its fully qualified name, shape, the verdict (convert to
fp8 with torchao's convert_to_float8_training, or keep in high precision) and the reason,
and a module_filter_fn that carries the plan out (printed; --write FILE writes it as a
module to import).  Needs torch, not torchao.

WARNING: like `amplint verify`, fp8-plan IMPORTS AND RUNS YOUR CODE: it calls FACTORY and
runs one forward pass (no gradients) to see each layer's real shape and tokens.

PATH::FACTORY as for verify (FACTORY defaults to `example`).  Exit 0 on success, 2 on a
usage or target error."""


def add_plan_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("target", metavar="PATH[::FACTORY]", help="file and factory returning (model, example_inputs)")
    add_fp8_options(p)
    p.add_argument("--write", metavar="FILE.py", help="write the module_filter_fn (and the kept layers) to this file")
    p.add_argument("--format", choices=("text", "json"), default="text")


def add_fp8_options(p) -> None:
    p.add_argument("--recipe", choices=RECIPES, default=None, help="torchao float8 recipe (default tensorwise)")
    p.add_argument("--tokens", type=_positive_int, metavar="N", default=None,
                   help="tokens per step (M of every GEMM) to plan for, e.g. batch x sequence length per GPU; "
                        "default: what the example inputs feed each layer")
    p.add_argument("--convert-head", action="store_true", default=None,
                   help="also convert the output head and the first projection (kept in high precision by default)")


def _command(args) -> str:
    parts = ["amplint fp8-plan", args.target]
    if args.recipe:
        parts += ["--recipe", args.recipe]
    if args.tokens:
        parts += ["--tokens", str(args.tokens)]
    if args.convert_head:
        parts.append("--convert-head")
    if args.write:
        parts += ["--write", args.write]
    return " ".join(parts)


def _shape(layer) -> str:
    return f"{layer.in_features} x {layer.out_features}"


def plan_text(plan) -> list[str]:
    tokens = f"{plan.tokens} tokens per step" if plan.tokens else "tokens per layer from the example inputs"
    lines = [f"fp8 plan for {plan.target} (torchao {plan.recipe} recipe, {tokens})"]
    width = max((len(layer.fqn) for layer in plan.layers), default=4)
    for layer in plan.layers:
        m = f"M={layer.tokens}" if layer.tokens else "M=?"
        code = f"{layer.code} " if layer.code else ""
        lines.append(f"  {layer.verdict:<7}  {layer.fqn:<{width}}  {_shape(layer):>13}  {m:<8} {code}{layer.reason}")
    lines.append(f"{len(plan.converted)} of {len(plan.layers)} Linear layers converted, {len(plan.kept)} kept in high precision.")
    if plan.bypassed:
        lines.append("Not convertible: 2-D parameters outside any nn.Linear (a forward that multiplies them through "
                     "F.linear / matmul / @ stays bf16, AMP701): " + ", ".join(plan.bypassed))
    return lines


def plan_main(args) -> int:
    from ..verify.target import TargetError
    from .plan import load_and_plan

    try:
        plan = load_and_plan(args.target, recipe=args.recipe or "tensorwise", tokens=args.tokens,
                             convert_head=bool(args.convert_head))
    except TargetError as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # the user's factory or forward failed: one line, not a traceback
        print(f"amplint: error: {args.target}: the model could not be built and run once: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return EXIT_ERROR
    source = plan.filter_source(_command(args))
    if args.write:
        try:
            with open(args.write, "w", encoding="utf-8") as f:
                f.write(source)
        except OSError as exc:
            print(f"amplint: error: --write {args.write}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
    if args.format == "json":
        data = plan.to_dict()
        data["filter_source"] = source
        data["written"] = args.write
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print("\n".join(plan_text(plan)))
    if args.write:
        module = os.path.splitext(os.path.basename(args.write))[0]
        print(f"Wrote {args.write}: `from {module} import module_filter_fn`, then "
              f"convert_to_float8_training(model, module_filter_fn=module_filter_fn)")
    else:
        print("\nmodule_filter_fn (paste it, or write it to a file with --write fp8_filter.py):\n")
        print(source)
    return EXIT_OK


# --- verify --target fp8 --------------------------------------------------------------------

def _fmt(x, spec=".3g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def report_text(report) -> list[str]:
    lines = [f"{report.target}: bf16 against torchao fp8 ({report.recipe}), {report.steps} training steps on {report.device}"]
    lines += ["  " + line for line in plan_text(report.plan)[1:]]
    diff = report.loss_difference
    lines.append(f"  loss bf16 {', '.join(_fmt(x, '.5g') for x in report.bf16_losses)}")
    lines.append(f"  loss fp8  {', '.join(_fmt(x, '.5g') for x in report.fp8_losses)}")
    lines.append(f"  loss difference (max relative over the steps): {_fmt(diff)}")
    converted = [s for s in report.layers if s.output_error is not None]
    if converted:
        lines.append("  converted layers, step 0 (each on the bf16 model's own input):")
        width = max(len(s.fqn) for s in converted)
        lines.append(f"    {'layer':<{width}}  input amax  input rms  weight amax  scale     below e4m3 normal  output error")
        for s in converted:
            flag = "  <- stands out" if s.outlier else ""
            lines.append(f"    {s.fqn:<{width}}  {_fmt(s.input_amax):>10}  {_fmt(s.input_rms):>9}  {_fmt(s.weight_amax):>11}  "
                         f"{_fmt(s.input_scale):>8}  {_fmt(s.input_below_normal, '.2%'):>17}  {_fmt(s.output_error):>12}{flag}")
    else:
        lines.append("  no layer was converted: nothing ran in fp8 (the plan keeps every layer; --tokens plans for a "
                     "training batch, --convert-head converts the head)")
    if report.outliers:
        lines.append(f"  layers whose output error stands out (> {4:g}x the median): "
                     + ", ".join(s.fqn for s in report.outliers))
    if report.step_ms:
        lines.append("  step time (compiled): " + ", ".join(f"{k} {_fmt(v, '.2f')} ms" for k, v in report.step_ms.items()))
    elif report.emulated:
        lines.append("  step time: not measured (fp8 emulated: no fp8 Tensor Cores here)")
    if report.error:
        lines.append(f"  {report.error}")
    return lines


def verify_main(args, targets, tolerance: float) -> int:
    """``amplint verify --target fp8`` on parsed targets."""
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        from .verify import missing_torchao

        print(missing_torchao(), file=sys.stderr)
        return EXIT_ERROR
    from ..verify.target import TargetError
    from .verify import verify_target

    reports, status = [], EXIT_OK
    for target in targets:
        try:
            report = verify_target(target.path + "::" + target.factory, recipe=args.recipe or "tensorwise",
                                   tokens=args.tokens, steps=args.steps or 3, device=args.device, loss=args.loss or "auto",
                                   seed=args.seed or 0, lr=args.lr or 1e-4, convert_head=bool(args.convert_head))
        except TargetError as exc:
            print(f"amplint: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except Exception as exc:
            print(f"amplint: error: {target}: verify --target fp8 failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                  file=sys.stderr)
            status = EXIT_UNSAFE
            continue
        reports.append(report)
        diff = report.loss_difference
        if diff is None or not math.isfinite(diff) or diff > tolerance:
            status = EXIT_UNSAFE
    if args.format == "json":
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        for r in reports:
            print("\n".join(report_text(r)))
            diff = r.loss_difference
            verdict = "within" if diff is not None and math.isfinite(diff) and diff <= tolerance else "beyond"
            print(f"  fp8 loss {verdict} --tolerance {tolerance:g} of bf16")
    if args.report:
        from .report_html import write_html

        try:
            write_html(args.report, reports)
        except OSError as exc:
            print(f"amplint: error: --report {args.report}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
    return status
