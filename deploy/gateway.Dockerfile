# The inference gateway's image (infra/hostedtrain.yml's GatewayImage): the hostedtrain binary,
# whose `gateway` command the task runs. Build it from the repository root, for arm64 (Fargate
# Graviton, as the task definition says):
#   CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build -o bin/linux-arm64/hostedtrain ./cmd/hostedtrain
#   docker build --platform linux/arm64 -f deploy/gateway.Dockerfile -t REGISTRY/hostedtrain-gateway .
FROM gcr.io/distroless/static-debian12:nonroot
COPY bin/linux-arm64/hostedtrain /hostedtrain
EXPOSE 8080
ENTRYPOINT ["/hostedtrain"]
CMD ["gateway", "--addr", ":8080"]
