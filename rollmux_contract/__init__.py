"""The neutral contract between the web app and the workers: standard library only.

Both sides import it and neither imports the other for it (import-linter contracts keep it
so, and `tests/contract/` checks that it imports only the standard library):

- `rollmux_contract.phases`: what the controller hands a dispatcher (`PhaseOrder`), what
  comes back (`PhaseReport`, with a typed `Outcome` and the node a lost phase names), the
  host's answer to a probe (`Probe`) and the `Dispatcher` protocol;
- `rollmux_contract.runners`: the runner names every deployment has and the allowlist rule
  (which import paths a job may name, which entries an admin may register), applied by the
  submission check before anything is stored and by a worker before anything is imported.
"""
