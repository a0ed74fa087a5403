"""``--report report.html``: one self-contained file (inline CSS, JS and SVG; no network).

Per target, for the original code and (with ``--fix``) the fixed copies, one chart per level:
each module's output value range (smallest non-zero magnitude to abs-max) on a log scale,
against the low-precision dtype's largest value, smallest normal and smallest subnormal;
modules with inf/NaN are marked.  The data is embedded as JSON; the script draws the SVG.
"""
from __future__ import annotations

import html
import json
import math
import os

from amplint.numerics import FORMATS

from .report_text import first_problem, level_status, loss_scale_text, num


def _clean(x):
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def _runs(runs: dict) -> list[dict]:
    out = []
    for level, run in runs.items():
        mods = []
        for m in run.get("modules", ()):
            f = m["forward"]
            g = m["grad"]
            if not f["calls"]:
                continue
            mods.append({"name": m["name"], "cls": m["class"], "max": _clean(f["absmax"]), "min": _clean(f["min_nonzero"]),
                         "inf": f["inf"], "nan": f["nan"], "dtypes": f["dtypes"], "gmax": _clean(g["absmax"]),
                         "gmin": _clean(g["min_nonzero"]), "ginf": g["inf"] + g["nan"], "uf": _clean(f["underflow"])})
        crash = run.get("crash")
        losses = run.get("losses") or []
        out.append({"level": level, "status": level_status(run), "modules": mods,
                    "crash": f"{crash['type']}: {crash['message']} ({os.path.basename(crash['file'] or '?')}:{crash['line']})" if crash else None,
                    # what the text report's levels table says: where it failed first, loss, scaler
                    "first": first_problem(run), "first_module": run.get("first_nonfinite_module"),
                    "loss": f"{num(losses[0])} \u2192 {num(losses[-1])}" if losses else "-",
                    "scale": loss_scale_text(run), "skipped": run.get("skipped_steps", 0)})
    return out


def render(reports: list[dict]) -> str:
    data = []
    for r in reports:
        if r.get("error"):
            data.append({"target": r["target"], "error": r["error"]})
            continue
        fmt = FORMATS[r["dtype"]]
        data.append({
            "target": r["target"], "dtype": r["dtype"], "device": r["device"],
            "limits": {"max": fmt.max, "normal": fmt.smallest_normal, "subnormal": fmt.smallest_subnormal},
            "before": _runs(r["before"]), "after": _runs(r["after"]) if r.get("after") else None,
            "findings": [{"code": f["code"], "rule": f["rule"], "where": f"{os.path.relpath(f['path'])}:{f['line']}",
                          "status": f["status"], "message": f["message"]} for f in r.get("findings", ())],
            "runtime_only": [{"level": p["level"], "kind": p["kind"], "detail": p["detail"]} for p in r.get("runtime_only", ())],
            "exit_status": r.get("exit_status", 0),
        })
    payload = json.dumps(data).replace("</", "<\\/")
    title = "amplint verify: " + ", ".join(html.escape(r["target"]) for r in reports)
    return _TEMPLATE.replace("__TITLE__", title).replace("__DATA__", payload)


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:20px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccd}h3{font-size:15px;margin:16px 0 4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f1f3f8}.ok{color:#17803d}.bad{color:#c62828;font-weight:600}.dim{color:#778}
.legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:18px;height:8px;margin-right:4px;vertical-align:middle}
svg text{font:11px system-ui,sans-serif}.panel{display:inline-block;vertical-align:top;margin-right:24px}
</style></head><body>
<h1>amplint verify</h1>
<p class="dim">Value range of each module's output (smallest non-zero magnitude to largest magnitude) per opt level, on a log scale,
against the low-precision dtype's limits. Red marks: inf/NaN in the module's output. Self-contained file: no network.</p>
<div id="root"></div>
<script id="amplint-data" type="application/json">__DATA__</script>
<script>
(function(){
"use strict";
var DATA = JSON.parse(document.getElementById("amplint-data").textContent);
var NS = "http://www.w3.org/2000/svg";
var COLORS = {O0:"#546e7a", O1:"#1e88e5", O2:"#8e24aa", O3:"#ef6c00"};
function el(tag, attrs, text){var e=document.createElementNS(NS,tag);for(var k in attrs)e.setAttribute(k,attrs[k]);if(text!=null)e.textContent=text;return e;}
function h(tag, attrs, text){var e=document.createElement(tag);for(var k in (attrs||{}))e.setAttribute(k,attrs[k]);if(text!=null)e.textContent=text;return e;}
function fmt(x){if(x==null)return "-";if(x===0)return "0";if(Number.isInteger(x)&&Math.abs(x)<1e6)return String(x);var a=Math.abs(x);return (a>=1e-3&&a<1e5)?(+x.toPrecision(4)).toString():x.toExponential(2);}
function chart(run, limits, title){
  // a crash gets its own line under the title, above the rows (not over a module's bar)
  var mods = run.modules, rowH = 16, left = 230, width = 560, top = run.crash ? 50 : 34, bottom = 26;
  var lo = Math.log10(limits.subnormal) - 1, hi = Math.log10(limits.max) + 1;
  mods.forEach(function(m){ if(m.min>0) lo=Math.min(lo, Math.floor(Math.log10(m.min))); if(m.max>0) hi=Math.max(hi, Math.ceil(Math.log10(m.max))); });
  lo = Math.max(lo, -45); hi = Math.min(hi, 40);
  var H = top + bottom + rowH * Math.max(mods.length, 1);
  var svg = el("svg", {width: left + width + 20, height: H, "class": "range-chart", "data-level": run.level, role:"img"});
  svg.appendChild(el("text", {x: 4, y: 14, "font-weight": "bold"}, title + " " + run.level + " - " + run.status));
  function X(v){ return left + (Math.log10(v) - lo) / (hi - lo) * width; }
  for (var d = Math.ceil(lo); d <= hi; d += Math.max(1, Math.round((hi-lo)/10))) {
    var x = X(Math.pow(10, d));
    svg.appendChild(el("line", {x1:x, x2:x, y1:top-4, y2:H-bottom, stroke:"#eceff4"}));
    svg.appendChild(el("text", {x:x-10, y:H-8, fill:"#667"}, "1e" + d));
  }
  [["max", limits.max, "#c62828"], ["smallest normal", limits.normal, "#f9a825"], ["smallest subnormal", limits.subnormal, "#6d4c41"]].forEach(function(l){
    var x = X(l[1]);
    svg.appendChild(el("line", {x1:x, x2:x, y1:top-8, y2:H-bottom, stroke:l[2], "stroke-dasharray":"4 3", "class":"limit", "data-limit":l[0]}));
    svg.appendChild(el("text", {x:x+2, y:top-10, fill:l[2]}, l[0]));
  });
  if (run.crash) svg.appendChild(el("text", {x:4, y:30, fill:"#c62828", "class":"crash"}, "crashed: " + run.crash));
  mods.forEach(function(m, i){
    var y = top + i * rowH + rowH / 2;
    var g = el("g", {"class":"module-row", "data-module": m.name});
    g.appendChild(el("text", {x:4, y:y+4}, (m.name.length > 34 ? "\u2026" + m.name.slice(-33) : m.name)));
    if (m.max > 0) {
      var x1 = X(m.min > 0 ? m.min : m.max), x2 = X(m.max);
      var bar = el("rect", {x:x1, y:y-4, width:Math.max(2, x2-x1), height:8, fill:COLORS[run.level]||"#555", rx:2});
      bar.appendChild(el("title", {}, m.name + " (" + m.cls + ", " + m.dtypes.join("/") + "): " + fmt(m.min) + " .. " + fmt(m.max)));
      g.appendChild(bar);
    }
    if (m.name === run.first_module) {  // the first module whose output went inf/NaN, singled out
      g.appendChild(el("rect", {x:0, y:y-rowH/2, width:left+width+20, height:rowH, fill:"none", stroke:"#c62828", "class":"first-failure"}));
      g.appendChild(el("text", {x:left+width-120, y:y+4, fill:"#c62828", "font-weight":"bold"}, "first inf/NaN"));
    }
    if (m.inf + m.nan > 0) {
      var mark = el("circle", {cx:left+width-4, cy:y, r:5, fill:"#c62828", "class":"nonfinite"});
      mark.appendChild(el("title", {}, m.inf + " inf, " + m.nan + " NaN"));
      g.appendChild(mark);
    }
    svg.appendChild(g);
  });
  return svg;
}
function table(headers, rows, cls){
  var t = h("table", {"class": cls||""}), tr = h("tr");
  headers.forEach(function(x){ tr.appendChild(h("th", {}, x)); }); t.appendChild(tr);
  rows.forEach(function(r){ var tr=h("tr"); r.forEach(function(c){ var td=h("td", {}, c); if(/CRASH|inf\/NaN|not safe|did not|changes fp32/.test(c)) td.className="bad"; else if(/^(ok|fixed|safe)$/.test(c)) td.className="ok"; tr.appendChild(td);}); t.appendChild(tr); });
  return t;
}
var root = document.getElementById("root");
DATA.forEach(function(t){
  var sec = h("section", {"class":"target"});
  sec.appendChild(h("h2", {}, t.target));
  if (t.error) { sec.appendChild(h("p", {"class":"bad"}, t.error)); root.appendChild(sec); return; }
  sec.appendChild(h("p", {}, t.device + ", " + t.dtype + " (max " + fmt(t.limits.max) + ", smallest normal " + fmt(t.limits.normal) + ", smallest subnormal " + fmt(t.limits.subnormal) + ") - " + (t.exit_status ? "not safe" : "safe")));
  var legend = h("p", {"class":"legend"});
  Object.keys(COLORS).forEach(function(k){ var s=h("span"); var sw=h("span",{"class":"sw"}); sw.style.background=COLORS[k]; s.appendChild(sw); s.appendChild(document.createTextNode(k)); legend.appendChild(s); });
  sec.appendChild(legend);
  [["Original code", t.before], ["After the fixes", t.after]].forEach(function(v){
    if (!v[1]) return;
    sec.appendChild(h("h3", {}, v[0]));
    sec.appendChild(table(["level", "status", "loss first\u2192last", "loss scale", "skipped steps", "first failure (source line)"],
      v[1].map(function(run){ return [run.level, run.status, run.loss, run.scale, String(run.skipped), run.first]; }), "levels"));
    v[1].forEach(function(run){ var d=h("div", {"class":"panel"}); d.appendChild(chart(run, t.limits, v[0])); sec.appendChild(d); });
  });
  if (t.findings.length) { sec.appendChild(h("h3", {}, "Static findings")); sec.appendChild(table(["code", "rule", "where", "status", "message"], t.findings.map(function(f){ return [f.code, f.rule, f.where, f.status, f.message]; }), "findings")); }
  if (t.runtime_only.length) { sec.appendChild(h("h3", {}, "Runtime problems no rule predicted")); sec.appendChild(table(["level", "kind", "detail"], t.runtime_only.map(function(p){ return [p.level, p.kind, p.detail]; }), "runtime-only")); }
  var rows = [];
  var names = [], seen = {};
  t.before.forEach(function(run){ run.modules.forEach(function(m){ if(!seen[m.name]){ seen[m.name]=m; names.push(m.name); } }); });
  names.forEach(function(name){
    var m = seen[name], row = [m.name, m.cls];
    t.before.forEach(function(run){ var mm = run.modules.filter(function(x){ return x.name === name; })[0]; row.push(mm ? fmt(mm.min) + " .. " + fmt(mm.max) + (mm.inf+mm.nan ? " (inf/NaN)" : "") : "-"); });
    rows.push(row);
  });
  sec.appendChild(h("h3", {}, "Module output ranges (original code)"));
  sec.appendChild(table(["module", "class"].concat(t.before.map(function(r){ return r.level; })), rows, "modules"));
  root.appendChild(sec);
});
document.body.setAttribute("data-rendered", "yes");
})();
</script></body></html>
"""
