"""A table as a self-contained HTML page, the form `snakemake --report` shows: the paper's row order,
per metric the paper's number, ours and the difference, and signatures and reasons as numbered footnotes.
The tidy frame and the other renderings (Markdown, LaTeX) are in rnmt.report.tables."""

from __future__ import annotations

import html
import math

import pandas as pd

from rnmt.evaluate.metric_names import better
from rnmt.planning.table import Table
from rnmt.report import claims, significance
from rnmt.report.layout import COUNTS, fmt, fmt_count, footer, label, signed

_HTML_STYLE = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; font-size: 14px; margin: 1.5em; color: #222; }
h1 { font-size: 1.25em; margin: 0 0 .3em 0; }
p.paper { color: #555; margin: 0 0 1em 0; }
table { border-collapse: collapse; border-top: 2px solid #222; border-bottom: 2px solid #222; }
th, td { padding: .3em .8em; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
thead tr:last-child th { border-bottom: 1px solid #222; }
th.group { border-bottom: 1px solid #999; text-align: center; }
td.paper { color: #555; }
td.diff.worse { color: #a33; }
td.diff.better { color: #276; }
tbody tr:nth-child(even) { background: #f5f5f5; }
sup { color: #36c; }
ol.notes, div.footer { font-size: .9em; color: #444; margin-top: 1em; }
code { font-size: .95em; }
div.scroll { overflow-x: auto; max-width: 100%; }
th:first-child, td:first-child { position: sticky; left: 0; background: #fff; }
tbody tr:nth-child(even) td:first-child { background: #f5f5f5; }
h2 { font-size: 1.1em; margin: 1.5em 0 .4em 0; }
td.holds { color: #276; } td.fails { color: #a33; } td.unsure { color: #888; }
"""


_VERDICT_CLASS = {claims.HOLDS: "holds", claims.FAILS: "fails", claims.UNSURE: "unsure"}


def _html_text(s: str) -> str:
    """Escaped, with Markdown's `code` spans as <code>."""
    parts = html.escape(s).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def html_table(table: Table, df: pd.DataFrame) -> str:
    """A self-contained HTML page of the table: systems in the paper's row order; per metric the paper's
    number, ours and the difference where the paper gave one; each metric's scorer signature and each
    untrained row's reason as numbered footnotes (what `snakemake --report` shows)."""
    has_paper = {m: bool(df[(df.metric == m)].paper.notna().any()) for m in table.metrics}
    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"<sup>{notes.index(text) + 1}</sup>"

    sig_note = {}
    for metric in table.metrics:
        sig = next((s for s in df[df.metric == metric].signature if s), "")
        if sig:
            sig_note[metric] = note(f"Scored with `{sig}`")
    top = ['<th rowspan="2">System</th>']
    sub = []
    for m in table.metrics:
        name = html.escape(label(m)) + sig_note.get(m, "")
        if has_paper[m]:
            top.append(f'<th class="group" colspan="3">{name}</th>')
            sub += ["<th>paper</th>", "<th>ours</th>", "<th>Δ</th>"]
        else:
            top.append(f'<th rowspan="2">{name}</th>')
    body = []
    for row in table.rows:
        sub_df = df[df.system == row.system].set_index("metric")
        mark = note(row.why_not) if not row.trained and table.kind != "cells" else ""
        cells = [f"<td>{html.escape(row.system)}{mark}</td>"]
        for m in table.metrics:
            r = sub_df.loc[m]
            show = fmt_count if m in COUNTS else fmt
            ours = html.escape(show(r.ours, r["std"]))
            if r.p_value < significance.ALPHA:
                ours += significance.MARK
            if isinstance(r.why_empty, str) and r.why_empty and math.isnan(r.ours) and row.trained:
                ours += note(r.why_empty)
            if has_paper[m]:
                d = r["diff"]
                way = 0 if math.isnan(d) or d == 0 else better(m) * (1 if d > 0 else -1)
                sign = {1: " better", -1: " worse", 0: ""}[way]
                cells += [f'<td class="paper">{html.escape(show(r.paper))}</td>', f"<td>{ours}</td>",
                          f'<td class="diff{sign}">{signed(d)}</td>']
            else:
                cells.append(f"<td>{ours}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(table.title)}</title><style>{_HTML_STYLE}</style></head><body>",
           f"<h1>{html.escape(table.title)}</h1>"]
    if table.paper:
        out.append(f'<p class="paper">Paper numbers: {_html_text(table.paper.strip().rstrip("."))}.</p>')
    # a table wider than the page scrolls sideways rather than losing its right-hand columns
    out += ['<div class="scroll"><table><thead>', "<tr>" + "".join(top) + "</tr>"]
    out += ["<tr>" + "".join(sub) + "</tr>"] if sub else []
    out += ["</thead><tbody>", *body, "</tbody></table></div>"]
    if notes:
        out.append('<ol class="notes">' + "".join(f"<li>{_html_text(n)}</li>" for n in notes) + "</ol>")
    out.append('<div class="footer">' + "".join(f"<p>{_html_text(line)}</p>"
                                                for line in footer(table, df, with_signatures=False)) + "</div>")
    checked = df.attrs.get("claims")
    if checked is not None and len(checked):
        out += ["<h2>The paper's claims, checked</h2>", '<div class="scroll"><table><thead><tr>'
                + "".join(f"<th>{html.escape(h)}</th>" for h in claims.HEADER) + "</tr></thead><tbody>"]
        out += ["<tr>" + "".join(f'<td class="{_VERDICT_CLASS.get(c, "")}">{html.escape(c)}</td>' for c in cells)
                + "</tr>" for cells in claims.lines(checked)]
        out += ["</tbody></table></div>", f'<div class="footer"><p>{_html_text(claims.note(checked))}</p></div>']
    out.append("</body></html>")
    return "\n".join(out) + "\n"
