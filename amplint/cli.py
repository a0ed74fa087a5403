"""The ``amplint`` command line (also ``python -m amplint``).

Exit codes: 0 clean (or findings below ``--fail-on`` only, default: only ``info``); 1
findings (for ``fix``: findings left after fixing; for ``fix --diff``: changes it would make); 2 usage or configuration error, or a file that
could not be read or parsed (the other files are still linted).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from . import __version__
from .config import DEVICES, ENGINES, FIX_STYLES, OPT_LEVELS, SEVERITIES, ConfigError, ConfigResolver
from .numerics import TARGETS

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


#: options people bring from other tools, and what to use instead
_INSTEAD = {"--fix": "use `amplint fix` (fixing is a command, not an option of check)",
            "--watch": "amplint has no watch mode; the language server (`amplint server`) lints as you type"}


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        # `check --fix` must not be taken as an abbreviation of --fix-style
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # usage errors: exit 2, the reason on one line and where help is (Ruff's way)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message}\nFor more information, try `{self.prog} --help`.\n")

    def unrecognized(self, extras: list[str]) -> None:
        """``unrecognized arguments``, with a "did you mean" for each misspelt option."""
        import difflib

        options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        hints = []
        for extra in extras:
            name = extra.split("=", 1)[0]
            if not name.startswith("-"):
                continue
            if name in _INSTEAD:
                hints.append(f"{name}: {_INSTEAD[name]}")
                continue
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.7)
            if close:
                hints.append(f"did you mean `{close[0]}`?")
        self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def _codes(value: str) -> list[str]:
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def _globs(value: str) -> list[str]:
    return [s for s in value.split(",") if s]


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if jobs < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (one per core) or more, not {jobs}")
    return jobs


def _add_lint_options(p: argparse.ArgumentParser, fix: bool) -> None:
    from .reporters import FORMATS

    p.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to lint (default: the current folder)")
    sel = p.add_argument_group("rule selection")
    sel.add_argument("--select", type=_codes, metavar="CODES", help="comma-separated codes or prefixes to enable (ALL: every rule); replaces the config's select")
    sel.add_argument("--extend-select", type=_codes, metavar="CODES", help="codes or prefixes to enable on top of the selection")
    sel.add_argument("--ignore", type=_codes, metavar="CODES", help="comma-separated codes or prefixes to disable")
    tgt = p.add_argument_group("what counts as a hazard")
    tgt.add_argument("--target", choices=TARGETS, help="the low-precision dtype you will train in (default fp16); a -1e9 mask is fine in bf16")
    tgt.add_argument("--opt-level", choices=OPT_LEVELS, help="apex-style opt level you will train at (default O1: autocast-style casting; O2/O3: half model)")
    tgt.add_argument("--device", choices=DEVICES, help="where autocast runs (default cuda; CPU autocast keeps softmax and sum in half)")
    tgt.add_argument("--alignment", type=int, metavar="N", help="Tensor Core alignment for layer sizes (default 8; 16 for fp8/int8)")
    tgt.add_argument("--engine", choices=ENGINES, help="the mixed-precision engine the project trains with (default auto: read from the linted files); decides the op policy (amplint and apex: O1 lists; torch: torch.autocast) and which amp module fixes may import")
    tgt.add_argument("--fix-style", choices=FIX_STYLES, help="how softmax fixes are written: functional (dtype=torch.float32) or module (nn.Softmax in __init__)")
    out = p.add_argument_group("output")
    out.add_argument("--format", "--output-format", choices=FORMATS, default=None, help="output format (default text; --output-format is Ruff's name)")
    out.add_argument("--output-file", "-o", metavar="FILE", help="write the report to FILE instead of stdout (amplint's own errors still go to stderr)")
    out.add_argument("--statistics", action="store_true", help="show counts per rule instead of each finding")
    out.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are findings (errors still exit 2)")
    out.add_argument("--fail-on", choices=SEVERITIES, default=None,
                     help="the lowest severity that makes the run exit 1 (default warning: info findings are reported and counted, exit 0)")
    out.add_argument("--report-unused-suppressions", action="store_true", help="report suppression comments that silence nothing (code AMP900)")
    out.add_argument("-q", "--quiet", action="store_true", help="print findings only, no summary or progress")
    run = p.add_argument_group("running")
    run.add_argument("--exclude", type=_globs, metavar="GLOBS",
                     help="comma-separated path globs to skip, in place of the config's exclude and the default excludes (Ruff's semantics)")
    run.add_argument("--extend-exclude", type=_globs, metavar="GLOBS",
                     help="comma-separated path globs to skip, added to exclude (and to the config's extend-exclude)")
    run.add_argument("--no-respect-gitignore", dest="respect_gitignore", action="store_false",
                     help="also lint files that .gitignore / .ignore files ignore (default: skip them when walking folders)")
    run.add_argument("--force-exclude", action="store_true",
                     help="apply exclude (and .gitignore) to paths named on the command line too (for pre-commit)")
    run.add_argument("--stdin-filename", metavar="NAME",
                     help="read the source from stdin and report it as NAME (its config, per-file-ignores); "
                          + ("write the fixed source to stdout, the findings left to stderr" if fix else "no PATH with it"))
    run.add_argument("--config", metavar="FILE", help="use this pyproject.toml instead of the nearest one")
    run.add_argument("--show-files", action="store_true", help="print the files that would be linted, one a line, and exit")
    run.add_argument("--show-settings", action="store_true",
                     help="print the settings resolved for the first PATH (its config file, then every setting) and exit")
    run.add_argument("--no-cache", action="store_true", help="do not read or write the result cache (.amplint_cache/)")
    run.add_argument("--cache-dir", metavar="DIR", help="where to keep the cache (default: .amplint_cache/ beside the config)")
    run.add_argument("-j", "--jobs", type=_jobs, default=0, metavar="N",
                     help="worker processes (default or 0: one per core; at most the number of files and twice the cores)")
    _add_allow_option(run)
    adopt = p.add_argument_group("adopting amplint on an existing codebase")
    adopt.add_argument("--baseline", metavar="FILE", help="do not report findings recorded in this baseline file (written by check --write-baseline)")
    if not fix:
        adopt.add_argument("--write-baseline", metavar="FILE", help="record every current finding in FILE and exit 0 (errors still exit 2)")
        adopt.add_argument("--add-noqa", action="store_true", help="append `# noqa: CODE` to the line of each finding (merging existing codes) and exit 0")
    if fix:
        p.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes (they may change fp32 numerics or the architecture)")
        p.add_argument("--diff", action="store_true", help="print a unified diff of the fixes and write nothing")
        p.add_argument("--verify", nargs="?", action="append", const="", metavar="PATH::FACTORY", default=None,
                       help="first prove the fixes at run time (`amplint verify --fix` on this target, or on "
                            "[tool.amplint.verify] targets when none is given; repeat the flag for more) and write "
                            "them only if that passes; this IMPORTS AND RUNS the targets' code")


def _add_allow_option(p) -> None:
    from .trust import ENV_VAR

    p.add_argument("--allow-local-rules", action="store_true",
                   help=f"load (and so RUN) the config's rule-paths and installed amplint.rules plugins; also {ENV_VAR}=1")


def _local_rules_allowed(args) -> bool:
    from .trust import allowed_by_env

    return getattr(args, "allow_local_rules", False) or allowed_by_env()


def _warn_rules_not_loaded(resolver: Optional[ConfigResolver], allowed: bool) -> None:
    """Configured or installed rules that were not loaded are never dropped silently."""
    from .trust import installed_plugins, not_loaded_warnings, repository_root

    plugins = [] if allowed else installed_plugins()
    configs = resolver.rules_not_loaded if resolver is not None else {}
    repository = resolver.repository if resolver is not None else repository_root()
    for line in not_loaded_warnings(configs, plugins, repository):
        print(line, file=sys.stderr)


def _command_of(argv: Optional[Sequence[str]]) -> Optional[str]:
    """The command ``argv`` names (its first word that is not an option: the top level
    has no option that takes a value), or None."""
    for word in sys.argv[1:] if argv is None else argv:
        if not word.startswith("-"):
            return word
    return None


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` (``check``, ``fix``...), the options of
    ``fp8-plan`` and ``verify`` only when it is one of them: they import their own
    modules, a start-up cost ``check`` of one file would otherwise pay every time."""
    parser = _Parser(
        prog="amplint",
        description="Find, fix and prove what breaks or slows PyTorch mixed-precision (fp16/bf16) training.",
        epilog="Run `amplint COMMAND --help` for a command's options. `check` and `fix` never import or run the code they read "
               "(local rules and plugins load only with --allow-local-rules); `verify` does.",
    )
    parser.add_argument("--version", action="version", version=f"amplint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    parser.commands = sub.choices  # name -> its parser: unrecognized arguments are reported by it
    check = sub.add_parser("check", help="lint files and folders", description="Lint Python files and notebooks for mixed-precision hazards. Exit 0 clean (info findings alone do "
                                                    "not fail: see --fail-on), 1 findings, 2 errors.")
    _add_lint_options(check, fix=False)
    fix = sub.add_parser("fix", help="apply fixes in place", description="Apply safe fixes in place (--unsafe-fixes: unsafe ones too; --diff: show, write nothing). Exit 1 when findings remain.")
    _add_lint_options(fix, fix=True)
    rules = sub.add_parser("rules", help="list every rule", description="List every rule: code, name, fix applicability, on by default or not.")
    rules.add_argument("--format", choices=("text", "json"), default="text")
    _add_allow_option(rules)
    explain = sub.add_parser("explain", help="show a rule's documentation", description="Show a rule's documentation: what it flags, why (with the fp16/bf16 numbers), an example and the fix.")
    explain.add_argument("code", metavar="CODE", help="rule code (AMP101) or name (overflow-constant)")
    _add_allow_option(explain)
    server = sub.add_parser("server", help="run the language server (LSP over stdio) for editors",
                            description='A language server over stdio: diagnostics, quick fixes, fix-all and hover. '
                                        'Needs the lsp extra: pip install "amplint[lsp]".')
    _add_allow_option(server)
    fp8_help = "which nn.Linear layers to convert to fp8, and the module_filter_fn (imports and runs your code)"
    verify_help = "run the model under O0-O3 and prove findings and fixes (imports and runs your code)"
    everything = command not in ("check", "fix", "rules", "explain", "server")  # help lists them all
    if everything or command == "fp8-plan":
        fp8_plan = sub.add_parser("fp8-plan", help=fp8_help, description=_fp8_cli().PLAN_DESCRIPTION)
        _fp8_cli().add_plan_arguments(fp8_plan)
    else:
        sub.add_parser("fp8-plan", help=fp8_help)
    if everything or command == "verify":
        try:
            from .verify import cli as verify_cli
        except ImportError:
            verify_cli = None
        if verify_cli is not None:
            verify = sub.add_parser("verify", help=verify_help, description=verify_cli.DESCRIPTION)
            verify_cli.add_arguments(verify)
    else:
        sub.add_parser("verify", help=verify_help)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser(_command_of(argv))
    args, extras = parser.parse_known_args(argv)
    if extras:  # reported by the command's own parser: its prog, its options to suggest
        parser.commands.get(args.command, parser).unrecognized(extras)
    try:
        if args.command in ("check", "fix"):
            return _lint(args)
        if args.command == "rules":
            return _rules(args)
        if args.command == "explain":
            return _explain(args)
        if args.command == "server":
            return _server(args)
        if args.command == "fp8-plan":
            return _needs_torch("amplint fp8-plan", lambda: _fp8_cli().plan_main(args))
        if args.command == "verify":
            from .verify import cli as verify_cli

            return _needs_torch("amplint verify", lambda: verify_cli.main(args))
    except ConfigError as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("amplint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()
    parser.print_help()
    return EXIT_ERROR


class _Stop(Exception):
    """Ends ``check``/``fix`` early with ``status``, after ``message`` (if any) on stderr as
    ``amplint: error: ...``: how a step of :func:`_lint` says the run cannot go on."""

    def __init__(self, status: int, message: Optional[str] = None):
        super().__init__(message)
        self.status, self.message = status, message


def _lint(args) -> int:
    """``check`` and ``fix``: the options checked, the run, its report, its exit status."""
    from .pipeline import run
    from .registry import RuleLoadError

    try:
        _check_usage(args)
        overrides = _overrides(args)
        allowed = _local_rules_allowed(args)
        resolver = ConfigResolver(overrides, args.config, allow_local_rules=allowed)
        paths, stdin = _paths_and_stdin(args)
        base = _base_settings(resolver, paths[0], args)
        _check_codes(args, base, resolver, allowed)
        baseline = _baseline(args)
        fmt = args.format or "text"
        if args.statistics and fmt not in ("text", "concise", "json"):
            raise _Stop(EXIT_ERROR, f"--statistics works with --format text, concise or json, not {fmt}")
        _verify_first(args, overrides, allowed)
    except _Stop as stop:
        if stop.message is not None:
            print(f"amplint: error: {stop.message}", file=sys.stderr)
        return stop.status
    if args.show_files:
        return _show_files(paths, resolver, args)
    if args.show_settings:
        return _show_settings(base, paths[0])
    progress, finish = _progress(args.quiet or fmt != "text")
    options = _run_options(args, stdin, progress)
    try:
        results = run(paths, resolver, options)
    except RuleLoadError as exc:
        print(f"amplint: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        finish()
    _warn_rules_not_loaded(resolver, allowed)
    _cell_maps(results, stdin)
    if stdin is None and not any(_linted(r) for r in results):
        # Ruff's warning and exit code: a run that checked nothing must not look green
        print("warning: No Python files found under the given path(s)", file=sys.stderr)
    if getattr(args, "write_baseline", None):
        return _write_baseline(args.write_baseline, results)
    if baseline is not None:
        _apply_baseline(args, baseline, results)
    if getattr(args, "add_noqa", False):
        return _add_noqa(results, resolver)
    status = _write_report(args, fmt, options, results, stdin)
    if status is not None:
        return status
    return _exit_status(args, base, options, results)


def _check_usage(args) -> None:
    """Option values that are wrong whatever the files: a usage error."""
    if args.alignment is not None and (args.alignment <= 0 or args.alignment & (args.alignment - 1)):
        raise _Stop(EXIT_ERROR, f"--alignment must be a positive power of two, not {args.alignment}")
    if args.config and not os.path.isfile(args.config):
        raise _Stop(EXIT_ERROR, f"--config {args.config}: no such file")


def _overrides(args) -> dict:
    """The command line's settings, over every config file's."""
    overrides = {
        "select": tuple(args.select) if args.select is not None else None,
        "extend_select": tuple(args.extend_select) if args.extend_select is not None else None,
        "ignore": tuple(args.ignore) if args.ignore is not None else None,
        "target": args.target, "opt_level": args.opt_level, "device": args.device,
        "alignment": args.alignment, "engine": args.engine, "fix_style": args.fix_style,
        "fail_on": args.fail_on,
    }
    if args.exclude:
        overrides["exclude"] = tuple(args.exclude)
    if args.extend_exclude:
        overrides["extend_exclude"] = tuple(args.extend_exclude)
    return overrides


def _paths_and_stdin(args) -> tuple[list[str], Optional[bytes]]:
    """The paths to lint, and the source read from stdin with ``--stdin-filename``."""
    if args.stdin_filename is None:
        return args.paths or ["."], None
    if args.paths:
        raise _Stop(EXIT_ERROR, "--stdin-filename reads the source from stdin: give no PATH")
    for option in ("add_noqa", "write_baseline"):  # they edit or record files on disk
        if getattr(args, option, None):
            raise _Stop(EXIT_ERROR, f"--{option.replace('_', '-')} works on files, not with --stdin-filename")
    return [args.stdin_filename], sys.stdin.buffer.read()


def _base_settings(resolver: ConfigResolver, path: str, args):
    """The settings of the first path: the rules and plugins the codes are checked against,
    ``fail_on``, ``--show-settings``."""
    try:
        return resolver.for_path(path)
    except ConfigError:
        if args.config or args.show_settings:  # --show-settings must not show defaults for a broken config
            raise
        # reported per file by the run, which lints the files other configs govern
        return resolver.defaults()


def _check_codes(args, base, resolver: ConfigResolver, allowed) -> None:
    """``--select``/``--ignore``/``--extend-select`` name known rules (plugins included)."""
    from .registry import RuleLoadError, all_rules, unknown_codes

    given = (("--select", args.select), ("--ignore", args.ignore), ("--extend-select", args.extend_select))
    if not any(codes for _, codes in given):  # loading every rule costs start-up time: only to check codes
        return
    try:
        known = all_rules(base.rule_paths, base.load_plugins)
    except RuleLoadError as exc:
        raise _Stop(EXIT_ERROR, str(exc)) from None
    for option, codes in given:
        bad = unknown_codes(codes or (), known)
        if bad:
            print(f"amplint: error: {option}: unknown rule code or prefix: {', '.join(bad)} (see `amplint rules`)", file=sys.stderr)
            _warn_rules_not_loaded(resolver, allowed)
            raise _Stop(EXIT_ERROR)


def _baseline(args):
    """The ``--baseline`` file read, or None."""
    if not args.baseline:
        return None
    from .baseline import Baseline, BaselineError

    try:
        return Baseline(args.baseline)
    except BaselineError as exc:
        raise _Stop(EXIT_ERROR, f"--baseline {exc}") from None


def _verify_first(args, overrides: dict, allowed) -> None:
    """``fix --verify``: the run-time verification, before anything is written."""
    if getattr(args, "verify", None) is None or args.diff:
        return
    for spec in args.verify:
        if spec and "::" not in spec and not spec.endswith(".py"):  # `fix --verify T .` once took `.` as a target
            raise _Stop(EXIT_ERROR, f"--verify {spec!r} is not PATH::FACTORY; put the paths to fix before --verify "
                                    f"(`amplint fix {spec} --verify TARGET`), one target per --verify")
    status = _needs_torch("amplint fix --verify", lambda: _verify_before_fix(args, overrides, allowed))
    if status != EXIT_CLEAN:
        # "did not pass" only after a verification that ran and failed; a usage or target
        # error (already on stderr) stops the fix before anything ran
        print("amplint: fixes not written: " + ("the run-time verification above did not pass" if status == EXIT_FINDINGS
                                                else "the run-time verification could not run"), file=sys.stderr)
        raise _Stop(status)


def _run_options(args, stdin: Optional[bytes], progress):
    from .pipeline import RunOptions

    return RunOptions(
        fix=args.command == "fix" and not getattr(args, "diff", False),
        unsafe_fixes=getattr(args, "unsafe_fixes", False),
        diff=getattr(args, "diff", False),
        use_cache=not args.no_cache and stdin is None,
        cache_dir=args.cache_dir,
        jobs=args.jobs,
        report_unused_suppressions=args.report_unused_suppressions,
        progress=progress,
        respect_gitignore=args.respect_gitignore,
        force_exclude=args.force_exclude,
        stdin=stdin,
    )


def _apply_baseline(args, baseline, results) -> None:
    """Leave out the findings the baseline records, and say how many."""
    for r in results:
        r.findings = baseline.filter(r.findings)
    if not args.quiet:
        stale = f"; {baseline.stale} of its entries matched nothing" if baseline.stale else ""
        print(f"amplint: {baseline.matched} finding{'s' if baseline.matched != 1 else ''} "
              f"in the baseline {args.baseline} not shown{stale}", file=sys.stderr)


def _write_report(args, fmt: str, options, results, stdin: Optional[bytes]) -> Optional[int]:
    """The report, where it goes (stdout, ``--output-file``, stderr when the fixed source
    goes to stdout); an exit status when it cannot be written."""
    if stdin is not None and options.fix:
        # an editor's "format with amplint": the fixed source (or the source unchanged) on
        # stdout, the findings left on stderr
        fixed = next((r.output for r in results if r.output is not None), stdin)
        sys.stdout.buffer.write(fixed)
        sys.stdout.flush()
        _report(args, fmt, options, results, sys.stderr)
    elif args.output_file:
        import io

        from .files import write_file

        out = io.StringIO()  # the report is written in one go by the one writer (no link out of the tree)
        _report(args, fmt, options, results, out)
        try:
            write_file(args.output_file, out.getvalue().encode("utf-8", "backslashreplace"), create=True)
        except OSError as exc:
            print(f"amplint: error: --output-file {args.output_file}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
    else:
        _report(args, fmt, options, results, sys.stdout)
    return None


def _exit_status(args, base, options, results) -> int:
    """Errors: 2; findings at or above ``fail_on`` (or changes shown by ``--diff``): 1."""
    if any(r.errors for r in results):
        return EXIT_ERROR
    failing = SEVERITIES[: SEVERITIES.index(base.fail_on) + 1]
    findings = any(f.severity.value in failing for r in results for f in r.findings)
    changes = options.diff and any(r.diff for r in results)
    if (findings or changes) and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_CLEAN


def _cell_maps(results, stdin) -> None:
    """Each notebook's cells, so that its findings are shown by cell (from the file as it is
    now: after ``fix``, the fixed one)."""
    from .files import SourceError, read_source
    from .notebook import cell_map, is_notebook

    for r in results:
        if is_notebook(r.path) and (r.findings or r.errors):
            try:
                r.cells = cell_map(read_source(r.path, stdin).text)
            except SourceError:
                pass  # the notebook's own error is reported in module lines


def _linted(result) -> bool:
    """Whether ``result`` is a file that was read (not a path skipped with a warning)."""
    return bool(result.findings or result.errors or not result.warnings)


def _discovered(paths, resolver: ConfigResolver, args):
    """What ``check`` would lint: (path, None) per file, (path, SourceError) per bad path
    or config (the engine's discovery, without reading a file)."""
    from .files import SourceError, discover

    def excluded(path: str, parents: bool = True) -> bool:
        try:
            return resolver.for_path(path).is_excluded(path, parents)
        except ConfigError as exc:
            raise _BadConfig(SourceError(exc.path or path, exc.reason, exc.line or 1, 1)) from None

    try:
        yield from discover(paths, excluded, respect_gitignore=args.respect_gitignore, force_exclude=args.force_exclude)
    except _BadConfig as bad:
        yield bad.error.path, bad.error


class _BadConfig(Exception):
    def __init__(self, error):
        self.error = error


def _show_files(paths, resolver: ConfigResolver, args) -> int:
    """``--show-files``: the files a run would lint, one a line, sorted (Ruff's option)."""
    from .reporters.common import printable

    files, status = [], EXIT_CLEAN
    for path, error in _discovered(paths, resolver, args):
        if error is None:
            files.append(path)
        else:
            kind = "warning" if error.severity == "warning" else "error"
            print(f"{printable(error.path)}:{error.line}:{error.col}: {kind}: {printable(error.reason)}", file=sys.stderr)
            status = status if kind == "warning" else EXIT_ERROR
    for path in sorted(files):
        sys.stdout.write(printable(path) + "\n")
    if not files:
        print("warning: No Python files found under the given path(s)", file=sys.stderr)
    return status


def _show_settings(settings, path: str) -> int:
    """``--show-settings``: where the settings for ``path`` come from, then each one, as TOML."""
    import dataclasses
    import json

    from .reporters.common import printable

    out = sys.stdout
    out.write(f"# settings for {printable(path)}\n")
    out.write(f"# config: {printable(settings.config_path) if settings.config_path else 'none (built-in defaults)'}\n")
    out.write("# (command-line options included; engine = \"auto\" is decided per file from the linted code)\n")
    out.write(f"# local rules and plugins loaded: {'yes' if settings.load_plugins else 'no (--allow-local-rules)'}\n")
    out.write("[tool.amplint]\n")
    # what is not a [tool.amplint] key stays out, so that the table can be pasted into a pyproject.toml
    hidden = {"root", "config_path", "engine_origin", "amp_module", "engine_configured", "target_given",
              "opt_level_given", "load_plugins"}
    for field in dataclasses.fields(settings):
        if field.name in hidden:
            continue
        value = getattr(settings, field.name)
        if field.name == "per_file_ignores":  # a TOML inline table
            pairs = ", ".join(f"{json.dumps(pattern)} = {json.dumps(list(codes))}" for pattern, codes in value)
            out.write(f"per-file-ignores = {{{' ' + pairs + ' ' if pairs else ''}}}\n")
            continue
        if isinstance(value, tuple):
            value = list(value)
        elif field.name == "alignment" and value is None:
            value = settings.effective_alignment()  # the target's
        out.write(f"{field.name.replace('_', '-')} = {json.dumps(value)}\n")
    return EXIT_CLEAN


def _report(args, fmt: str, options, results, out) -> None:
    from .reporters import reporter

    color = fmt == "text" and out.isatty() and not os.environ.get("NO_COLOR")
    try:
        if options.diff:  # Ruff's `--diff`: the diff alone on stdout (fit for `git apply`), the counts on stderr
            from .reporters.common import diff_summary, render_errors

            for r in results:
                if r.diff:
                    out.write(r.diff)
            render_errors(results, sys.stderr)
            if not args.quiet:
                print(diff_summary(results), file=sys.stderr)
        elif args.quiet and fmt in ("text", "concise"):
            from .reporters.common import render_errors, render_statistics
            from .reporters.concise import render_findings

            # -q: the findings (or with --statistics the counts) and nothing else
            (render_statistics if args.statistics else render_findings)(results, out)
            render_errors(results, sys.stderr)
        else:
            extra = {"rules": _loaded_rules(args)} if fmt == "sarif" else {}  # its rule table: plugins too
            reporter(fmt)(results, out, statistics=args.statistics, color=color, **extra)
        out.flush()
    except BrokenPipeError:  # `amplint check | head -1`: the reader has all it wanted
        _reader_went_away()


def _loaded_rules(args):
    """The rules the run loaded (``Settings.rules``: local rules and plugins where allowed)."""
    from .registry import RuleLoadError

    try:
        resolver = ConfigResolver(None, args.config, allow_local_rules=_local_rules_allowed(args))
        return resolver.for_path((args.paths or [args.stdin_filename or "."])[0]).rules()
    except (ConfigError, RuleLoadError):
        return None


def _write_baseline(file: str, results) -> int:
    from .baseline import write_baseline
    from .reporters.common import render_errors
    from .registry import UNUSED_SUPPRESSION

    findings = [f for r in results for f in r.findings if f.code != UNUSED_SUPPRESSION]
    try:
        count = write_baseline(file, findings)
    except OSError as exc:
        print(f"amplint: error: --write-baseline {file}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    render_errors(results, sys.stderr)
    print(f"Wrote {count} finding{'s' if count != 1 else ''} to the baseline {file}.", file=sys.stderr)
    return EXIT_ERROR if any(r.errors for r in results) else EXIT_CLEAN


def _add_noqa(results, resolver: ConfigResolver) -> int:
    from .files import SourceError
    from .noqa import add_noqa
    from .reporters.common import render_errors

    added = lines = files = 0
    for r in results:
        if not r.findings:
            continue
        try:
            codes, changed = add_noqa(r.path, r.findings, resolver.for_path(r.path))
        except SourceError as exc:
            r.errors.append(exc)
            continue
        added, lines, files = added + codes, lines + changed, files + bool(changed)
    render_errors(results, sys.stderr)
    print(f"Added {added} noqa code{'s' if added != 1 else ''} on {lines} line{'s' if lines != 1 else ''} "
          f"in {files} file{'s' if files != 1 else ''}.", file=sys.stderr)
    return EXIT_ERROR if any(r.errors for r in results) else EXIT_CLEAN


def _server(args) -> int:
    try:
        from . import server
    except ModuleNotFoundError as exc:
        if exc.name not in ("pygls", "lsprotocol") and not (exc.name or "").startswith(("pygls.", "lsprotocol.")):
            raise
        print('amplint server needs pygls: pip install "amplint[lsp]"', file=sys.stderr)
        return EXIT_ERROR
    return server.main(_local_rules_allowed(args))


def _fp8_cli():
    from .fp8 import cli as fp8_cli

    return fp8_cli


def _needs_torch(feature: str, run) -> int:
    """Run ``verify`` (which imports torch); without torch, one line naming the extra to install."""
    from .optional import is_missing_torch, missing_torch

    try:
        return run()
    except ModuleNotFoundError as exc:
        if not is_missing_torch(exc):
            raise
        print(missing_torch(feature), file=sys.stderr)
        return EXIT_ERROR


def _reader_went_away() -> int:
    """The reader of our output closed the pipe: stop writing, quietly.  Standard output
    is pointed at /dev/null so that the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return EXIT_ERROR


def _verify_before_fix(args, overrides: dict, allowed: bool) -> int:
    """``fix --verify``: ``amplint verify --fix`` on the given (or configured) targets, with
    this command's settings (``--target``, ``--opt-level``, ``--device``, ``--engine``,
    ``--select``/``--ignore``..., the config file, local rules): the fixes it proves are the
    fixes ``fix`` then writes, and its dtype is their target."""
    from .verify import cli as verify_cli
    from .verify.lintfix import LintSettings

    targets = [t for t in args.verify if t]
    parser = _Parser(prog="amplint fix --verify")
    verify_cli.add_arguments(parser)
    argv = targets + ["--fix"] + (["--unsafe-fixes"] if args.unsafe_fixes else [])
    if args.config:
        argv += ["--config", args.config]
    if args.opt_level:  # the levels to run: the one the fixes are for
        argv += ["--opt-level", args.opt_level]
    if args.device in ("cpu", "cuda"):
        argv += ["--device", args.device]
    settings = LintSettings(tuple(sorted(overrides.items())), args.config, allowed, exact=True)
    return verify_cli.main(parser.parse_args(argv), settings)


def _progress(disabled: bool):
    """A rich progress bar on stderr for long runs on a terminal; nothing otherwise."""
    if disabled or not sys.stderr.isatty():
        return None, lambda: None
    state = {}

    def update(done: int, total: int) -> None:
        if total < 50:
            return
        if "bar" not in state:
            from rich.progress import Progress

            bar = Progress(transient=True, console=None)
            bar.start()
            state["bar"], state["task"] = bar, bar.add_task("linting", total=total)
        state["bar"].update(state["task"], completed=done)

    def finish() -> None:
        if "bar" in state:
            state["bar"].stop()

    return update, finish


def _rules(args) -> int:
    import json

    from .registry import all_rules
    from .rule_docs import fix_label

    allowed = _local_rules_allowed(args)
    rules = all_rules((), allowed)
    _warn_rules_not_loaded(None, allowed)
    rows = [
        {
            "code": r.code, "name": r.name, "summary": r.summary, "severity": r.severity.value,
            "fix": fix_label(r),
            "default": r.enabled_by_default,
        }
        for r in rules
    ]
    if args.format == "json":
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_CLEAN
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table("code", "name", "fix", "default", "summary")
        for row in rows:
            table.add_row(row["code"], row["name"], row["fix"], "on" if row["default"] else "off", row["summary"])
        Console().print(table)
        return EXIT_CLEAN
    widths = [max(len(str(x)) for x in [h] + [row[k] for row in rows]) for h, k in (("code", "code"), ("name", "name"), ("fix", "fix"))]
    sys.stdout.write(f"{'code':<{widths[0]}}  {'name':<{widths[1]}}  {'fix':<{widths[2]}}  default  summary\n")
    for row in rows:
        sys.stdout.write(
            f"{row['code']:<{widths[0]}}  {row['name']:<{widths[1]}}  {row['fix']:<{widths[2]}}  "
            f"{'on ' if row['default'] else 'off'}      {row['summary']}\n"
        )
    return EXIT_CLEAN


def _explain(args) -> int:
    from .registry import all_rules
    from .rule_docs import rule_markdown

    wanted = args.code.strip()
    allowed = _local_rules_allowed(args)
    for rule in all_rules((), allowed):
        if rule.code == wanted.upper() or rule.name == wanted.lower():
            text = rule_markdown(rule)
            if sys.stdout.isatty():
                from rich.console import Console
                from rich.markdown import Markdown

                Console().print(Markdown(text))
            else:
                sys.stdout.write(text)
            return EXIT_CLEAN
    print(f"amplint: error: unknown rule {wanted!r} (see `amplint rules`)", file=sys.stderr)
    _warn_rules_not_loaded(None, allowed)
    return EXIT_ERROR
