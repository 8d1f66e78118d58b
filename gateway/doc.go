// Package gateway is the inference gateway: users' OpenAI-compatible requests in
// (GET {prefix}/models, GET {prefix}/models/{id}, POST {prefix}/chat/completions, the prefix
// "/api/v1" as PRIME_INFERENCE_URL names it), agents' tunnels in (GET /v1/agent/tunnel, an
// HTTP Upgrade to a yamux session the agent dials out, authenticated by its agent token), and
// each request routed by its model id ("BASE:ADAPTER_ID") to the node that serves that
// adapter, streamed without buffering, within its organization's rate, metered (tokens per
// adapter; a log line of ids, sizes and timings, never a body).
//
// It owns the tunnels and the routing; the adapters and their deployment are the queue's
// (queue.Deployments), reached through the Deployments interface. It must not import the API,
// the queue or the agent: `hostedtrain dev` embeds it beside the API, and on AWS it is a
// container service of its own (a Lambda cannot hold tunnels).
package gateway
