"""The report: report.json, report.md, report.html and its figures, from the metrics.

It consumes `pflpipe.metrics` (pure functions on tables and arrays) and renders what they
answer: `report_writer` builds and writes it, `rendering` turns it into Markdown and HTML, the
`*_section` modules each write one of its sections, `report_figures`/`score_curves` draw.
"""
