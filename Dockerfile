# One image for every RollMux service: web (gunicorn), Celery worker and beat, Ray head and
# Ray workers (Ray needs the same Python and Ray version on the driver and every node).
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    DJANGO_SETTINGS_MODULE=rollmux_web.settings

WORKDIR /app

# Dependencies first, so code changes do not reinstall them.
COPY pyproject.toml README.md ./
COPY scheduler/__init__.py scheduler/__init__.py
COPY workers/__init__.py workers/__init__.py
COPY rollmux_contract/__init__.py rollmux_contract/__init__.py
COPY rollmux_cli/__init__.py rollmux_cli/__init__.py
COPY rollmux_web/__init__.py rollmux_web/__init__.py
# The `rl` extra (torch 2.13.0, transformers, safetensors, trl): a worker runs `hf-grpo` jobs.
# torch from PyTorch's CPU index (about 200 MB; the default index's Linux wheel is a CUDA
# build of several GB): a GPU image passes --build-arg TORCH_INDEX=.../whl/cu126 instead;
# --build-arg ROLLMUX_EXTRAS= leaves the extra out (no real RL jobs on that image).
ARG ROLLMUX_EXTRAS=rl
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --extra-index-url "$TORCH_INDEX" -e ".[${ROLLMUX_EXTRAS}]"

COPY manage.py ./
COPY scheduler ./scheduler
COPY workers ./workers
COPY rollmux_contract ./rollmux_contract
COPY rollmux_cli ./rollmux_cli
COPY rollmux_web ./rollmux_web
COPY templates ./templates
COPY static ./static

# Static files are collected at build time; whitenoise serves them. No secret is needed for
# this step (settings fall back to an embedded key only while ROLLMUX_EMBEDDED is unset).
RUN python manage.py collectstatic --noinput

RUN useradd --create-home --uid 10001 rollmux \
    && mkdir -p /tmp/prometheus /var/lib/rollmux/checkpoints /var/lib/rollmux/archive \
    && chown rollmux /tmp/prometheus /var/lib/rollmux/checkpoints /var/lib/rollmux/archive
USER rollmux

EXPOSE 8000
CMD ["gunicorn", "-c", "python:rollmux_web.gunicorn_conf", "rollmux_web.wsgi"]
