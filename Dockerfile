# One image for the operator (`goalkeeper run`) and its steps (`goalkeeper-step KIND`).
# BASE_IMAGE: any image with python3 3.11 and its venv module at the same path in both
# stages; scripts/build-image.sh passes a local Debian stand-in where no registry is reachable.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
# A CA bundle inside the base for pip to trust (unset: pip's own).
ARG PIP_CERT
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
# A venv, not a prefix: the same layout works for the python image and Debian's python3.
# Dependencies first, in their own layer, so a code change does not reinstall them.
RUN python3 -m venv /opt/goalkeeper \
 && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && /opt/goalkeeper/bin/pip install --quiet -r requirements.txt
COPY operator ./operator
COPY crds ./crds
# The local control plane, `goalkeeper dev` and the local model are for development, not for
# a cluster.
RUN /opt/goalkeeper/bin/pip install --quiet --no-deps . \
 && /opt/goalkeeper/bin/pip uninstall --quiet -y pip setuptools \
 && site=$(/opt/goalkeeper/bin/python3 -c "import goalkeeper, os; print(os.path.dirname(goalkeeper.__file__))") \
 && rm -rf "$site/devcluster" "$site/dev.py" "$site/localmodel"

FROM ${BASE_IMAGE}
COPY --from=build /opt/goalkeeper /opt/goalkeeper
# The distroless "nonroot" ids, matching the step Jobs' and the chart's securityContext.
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home nonroot
USER 65532:65532
ENV PATH=/opt/goalkeeper/bin:$PATH HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["goalkeeper"]
CMD ["run"]
