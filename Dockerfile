# syntax=docker/dockerfile:1
# tollgate's control plane image (the admin console embedded) with the demo storage backend:
#   docker build --build-arg VERSION=$(scripts/version.sh) -t tollgate:local .
# Stages: the console (npm ci + vite build), the Go build (static: CGO_ENABLED=0, -trimpath, the
# version linked in), and a distroless base with no shell that runs as a non-root user.
# docker-compose.yml builds it; `make test` checks this file statically (t/compose_test.go).

FROM node:22-bookworm-slim AS console
WORKDIR /src/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY web/ ./
RUN npm run build

FROM golang:1.25-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
COPY --from=console /src/web/dist/ ./web/dist/
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X tollgate/internal/version.Version=${VERSION}" \
      -o /out/ ./controlplane/cmd/tollgate-controlplane ./demo/cmd/tollgate-demo-s3 && \
    mkdir -p /out/state

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/tollgate-controlplane /out/tollgate-demo-s3 /usr/bin/
# the run directory (config snapshots), the user's own: a volume mounted there starts so
COPY --from=build --chown=65532:65532 /out/state/ /var/lib/tollgate/
# distroless' nonroot user; no shell, no package manager
USER 65532:65532
ENV TOLLGATE_CP_ADDR=0.0.0.0:9090 TOLLGATE_RUN_DIR=/var/lib/tollgate
EXPOSE 9090
ENTRYPOINT ["/usr/bin/tollgate-controlplane"]
