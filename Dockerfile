# fakehop as a service, for CI jobs and compose files:
#
#   docker build -t fakehop .
#   docker run --rm -p 127.0.0.1:8080:8080 fakehop                         # http://127.0.0.1:8080 on the host
#   docker run --rm -e FAKEHOP_ADMIN_TOKEN=s3cret --network ci --name fakehop fakehop
#
# It serves on 0.0.0.0:8080 and answers Host names fakehop answers anywhere (loopback names,
# IP addresses) and `fakehop`, the service name the compose example gives it; another name
# needs `--allow-host NAME` in the command. Set FAKEHOP_ADMIN_TOKEN to guard the control API
# (serve, the health check and `docker exec ... fakehop verdict` read it); without it serve
# warns that others can reach the control API. Arguments after the image name replace the
# command: `docker run --rm fakehop list`. The image holds the redis client, for `serve --state`
# (docs/ci/replicas runs replicas sharing their state).

FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY fakehop fakehop
COPY scenarios scenarios
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.12-slim
COPY --from=build /dist /dist
# fakehop's wheel with its redis extra: its requirements as its own (DL3013 takes the extra for a package unpinned)
# hadolint ignore=DL3013
RUN set -- /dist/*.whl && pip install --no-cache-dir "$1[redis]" \
    && rm -rf /dist \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin fakehop
USER 10001
ENV PYTHONUNBUFFERED=1
EXPOSE 8080
# A bare urllib call: `fakehop wait` asks the same, for ten times the CPU time every 5 s.
HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; t = os.environ.get('FAKEHOP_ADMIN_TOKEN'); u.urlopen(u.Request('http://127.0.0.1:8080/_fakehop/health', headers={'Authorization': 'Bearer ' + t} if t else {}), timeout=2)"]
ENTRYPOINT ["fakehop"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--allow-host", "fakehop"]
