package gateway

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
)

// Several gateways: each agent is tunnelled to one of them, and each gateway files, in Redis,
// the agents whose tunnels it holds (tunnel:<agent> → its internal URL, kept while the tunnel
// is open, gone within routeLease of its end). A request that reaches a gateway without the
// tunnel of its adapter's node is handed, once, to the gateway that has it; that gateway checks
// the caller's token again and serves it as its own.

// ForwardedHeader marks a request one gateway handed to another (it is not handed on again).
const ForwardedHeader = "X-Hostedtrain-Forwarded"

// routeLease is how long a gateway's claim to an agent's tunnel lasts unrenewed.
const routeLease = 30 * time.Second

// Routes is the routing table of several gateways: a Redis client, the queue's key prefix
// ("ht") and this gateway's own URL as the others reach it.
type Routes struct {
	Redis     redis.UniversalClient
	Prefix    string
	Advertise string
}

func (r *Routes) key(agent string) string {
	return rediskeys.Queue.NamedKey("{"+cmp.Or(r.Prefix, "ht")+"}:", "tunnelkey", agent)
}

// hold files this gateway as the one with agent's tunnel until ctx ends, renewed meanwhile.
func (r *Routes) hold(ctx context.Context, agent string) {
	t := time.NewTicker(routeLease / 3)
	defer t.Stop()
	for {
		_ = r.Redis.Set(ctx, r.key(agent), r.Advertise, routeLease).Err()
		select {
		case <-ctx.Done():
			// Gone at once, unless another gateway took the agent meanwhile.
			end, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if cur, err := r.Redis.Get(end, r.key(agent)).Result(); err == nil && cur == r.Advertise {
				_ = r.Redis.Del(end, r.key(agent)).Err()
			}
			cancel()
			return
		case <-t.C:
		}
	}
}

// owner is the gateway that holds agent's tunnel, other than this one ("" for none known).
func (r *Routes) owner(ctx context.Context, agent string) string {
	addr, err := r.Redis.Get(ctx, r.key(agent)).Result()
	if errors.Is(err, redis.Nil) || err != nil || addr == r.Advertise {
		return ""
	}
	return addr
}

// forward hands a request to the gateway at addr, the body already read (body), streaming the
// answer back as it comes.
func forward(w http.ResponseWriter, r *http.Request, addr string, body []byte) {
	target, err := url.Parse(addr)
	if err != nil {
		openAIError(w, http.StatusBadGateway, "server_error", "upstream_unreachable", "the gateway holding the model's node is misnamed")
		return
	}
	p := httputil.NewSingleHostReverseProxy(target)
	p.FlushInterval = -1
	p.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) {
		openAIError(w, http.StatusBadGateway, "server_error", "upstream_unreachable", "the gateway holding the model's node could not be reached; try again")
	}
	out := r.Clone(r.Context())
	out.Header.Set(ForwardedHeader, "1")
	out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	p.ServeHTTP(w, out)
}
