# The mlgate webhook image: `mlgate serve`, as the README runs it.
#   docker build -t mlgate:0.1.0 .
#   docker run --rm -p 8443:8443 mlgate:0.1.0          (dev certificates under /tmp/mlgate)
# In the cluster, manifests/deployment.yaml passes --self-managed, the policy mount and --in-cluster.

# --- build: install mlgate and the dependencies requirements.lock pins into a venv ----------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/mlgate
COPY pyproject.toml README.md requirements.lock ./
COPY mlgate ./mlgate
COPY webhook ./webhook
COPY certs ./certs
COPY reconciler ./reconciler
COPY audit ./audit
COPY policies ./policies
COPY manifests ./manifests
RUN /opt/mlgate/bin/pip install --require-hashes -r requirements.lock \
 && /opt/mlgate/bin/pip install --no-deps . \
 && /opt/mlgate/bin/python -m compileall -q /opt/mlgate/lib \
 && /opt/mlgate/bin/pip uninstall -y pip setuptools

# --- run: the venv, the shipped policies, no compilers, no pip, no root ------------------------------
FROM python:3.11-slim
RUN python -m pip uninstall -y pip setuptools wheel
COPY --from=build /opt/mlgate /opt/mlgate
COPY policies /etc/mlgate/policies
ENV PATH=/opt/mlgate/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MLGATE_STATE_DIR=/tmp/mlgate
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["mlgate", "serve"]
CMD ["--host", "0.0.0.0", "--policies", "/etc/mlgate/policies"]
