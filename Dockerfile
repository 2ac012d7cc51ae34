# One image for the operator (`goalkeeper run`) and its steps (`goalkeeper-step KIND`).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY crds ./crds
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# The distroless "nonroot" ids, matching the step Jobs' securityContext.
RUN groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home nonroot
USER 65532:65532
ENV HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
ENTRYPOINT ["goalkeeper"]
CMD ["run"]
