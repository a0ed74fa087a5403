"""The HTML report of ``verify --target fp8``: one self-contained page, per target the
plan (convert / keep and why), the losses, and per converted layer its amax / scale
statistics and output error, with the layers whose error stands out marked."""
from __future__ import annotations

import html
import math

_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.l,th.l{text-align:left}tr.keep{color:#777}
tr.outlier{background:#fdd}.bar{display:inline-block;height:10px;background:#48c;vertical-align:middle}"""


def _f(x, spec=".3g") -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _target(report) -> str:
    e = html.escape
    errors = [s.output_error for s in report.layers if s.output_error]
    top = max(errors) if errors else 1.0
    rows = []
    for s in report.layers:
        layer = next(lay for lay in report.plan.layers if lay.fqn == s.fqn)
        cls = "outlier" if s.outlier else ("keep" if s.verdict == "keep" else "")
        bar = (f'<span class="bar" style="width:{max(1, int(120 * s.output_error / top))}px"></span> '
               if s.output_error else "")
        rows.append(
            f'<tr class="{cls}"><td class="l">{e(s.fqn)}</td><td>{layer.in_features} x {layer.out_features}</td>'
            f'<td class="l">{e(s.verdict)}</td><td class="l">{e(s.code)} {e(s.reason)}</td>'
            f"<td>{_f(s.input_amax)}</td><td>{_f(s.input_rms)}</td><td>{_f(s.weight_amax)}</td><td>{_f(s.input_scale)}</td>"
            f"<td>{_f(s.input_below_normal, '.2%')}</td><td class=\"l\">{bar}{_f(s.output_error)}</td></tr>")
    losses = "".join(f"<tr><td>{i}</td><td>{_f(a, '.6g')}</td><td>{_f(b, '.6g')}</td></tr>"
                     for i, (a, b) in enumerate(zip(report.bf16_losses, report.fp8_losses)))
    times = ", ".join(f"{e(k)} {_f(v, '.2f')} ms" for k, v in report.step_ms.items()) or (
        "not measured (fp8 emulated)" if report.emulated else "not measured")
    return (f"<h2>{e(report.target)}</h2><p>torchao {e(report.recipe)} recipe on {e(report.device)}; "
            f"{len(report.plan.converted)} of {len(report.plan.layers)} Linear layers converted; "
            f"loss difference {_f(report.loss_difference)}; step time: {times}</p>"
            "<table><tr><th>step</th><th>bf16 loss</th><th>fp8 loss</th></tr>" + losses + "</table>"
            '<table><tr><th class="l">layer</th><th>shape</th><th class="l">verdict</th><th class="l">reason</th>'
            "<th>input amax</th><th>input rms</th><th>weight amax</th><th>input scale</th><th>below e4m3 normal</th>"
            '<th class="l">output error vs bf16 (step 0)</th></tr>' + "".join(rows) + "</table>")


def write_html(path: str, reports) -> None:
    body = "".join(_target(r) for r in reports) or "<p>No target was verified.</p>"
    page = (f"<!doctype html><html><head><meta charset=\"utf-8\"><title>amplint verify --target fp8</title>"
            f"<style>{_STYLE}</style></head><body><h1>amplint verify --target fp8</h1>{body}</body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
