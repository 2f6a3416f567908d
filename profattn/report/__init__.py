"""The report layer: formatting, rows, charts, and the HTML, JSON and Markdown renderers."""
