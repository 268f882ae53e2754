"""The `rollmux` command line: an HTTP client of the RollMux API (`rollmux_cli.cli`).

It lives outside the Django package: it imports no Django, DRF, Celery, Ray, `workers` or
`scheduler` (an import-linter contract), only the job spec's field list and the duration
formatter the pages use (`rollmux_web.jobs.spec`, `rollmux_web.formatting`, both standard
library only), so what it checks before sending is what the server checks.
"""
