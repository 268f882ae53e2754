"""The scheduling core: pure (standard library, numpy, scipy), time and randomness passed in.

With `ROLLMUX_COMPILED=1` a process loads the core's hot modules from their compiled build
when it matches the sources (`scheduler.compiled`); otherwise, and by default, as Python.
"""

from scheduler.compiled import activate_from_env

activate_from_env()
