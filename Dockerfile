# Phalanx's operator image: `phalanx run` as a non-root user, dependencies pinned by requirements.lock.
#
#   hack/image.sh                        # builds it here with podman, no registry (docs/install.md)
#   docker build -t phalanx:0.1.0 .      # anywhere a registry serves the default BASE
#
# BASE is any Debian-like image with python3 (>= 3.11) and its venv module: the slim Python image by
# default; hack/image.sh passes a base it makes itself with mmdebstrap (localhost/debian-py:bookworm).
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
# The dependencies first: this layer is reused while only Phalanx's code changes.
COPY requirements.lock requirements-build.lock /src/
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-deps -r /src/requirements.lock \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install --no-deps -r /src/requirements-build.lock
COPY pyproject.toml /src/
COPY operator /src/operator
# Build the wheel with the pinned backend (no isolation: nothing unpinned is fetched), install it without
# dependencies, check the set is complete, then drop pip and setuptools from what ships.
RUN cd /src \
 && /opt/build/bin/pip wheel --no-deps --no-build-isolation -w /tmp/wheels . \
 && /opt/venv/bin/pip install --no-deps /tmp/wheels/phalanx-*.whl \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/pip uninstall -y -q pip setuptools \
 && find /opt/venv -name __pycache__ -prune -exec rm -rf {} + \
 && /opt/venv/bin/python -m compileall -q -j 0 /opt/venv/lib

FROM ${BASE}
# The chart runs the pod as 10001:10001 (runAsNonRoot needs a numeric USER to check).
RUN groupadd --gid 10001 phalanx \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin phalanx
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /tmp
EXPOSE 9443 8080
ENTRYPOINT ["phalanx", "run"]
