# One image for every toolsafe process: migration job, workers, beat, Flower, the
# gateway and the example downstream service (docker-compose.yml picks the command).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The dependencies first, read from pyproject.toml alone: a code change then rebuilds
# only the layers below.
COPY pyproject.toml README.md ./
# The gateway's extra too: the same image runs `toolsafe serve`.
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb')); \
print('\n'.join(p['project']['dependencies'] \
+ p['project']['optional-dependencies']['gateway']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY adapters ./adapters
COPY recovery ./recovery
COPY tasks ./tasks
COPY celeryconfig.py ./
COPY toolsafe ./toolsafe
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /app toolsafe \
    && chown toolsafe /app

# Nothing here needs root; /app is writable for beat's schedule file.
USER toolsafe

CMD ["toolsafe", "worker"]
