package webhook

import (
	"errors"
	"fmt"
	"time"
)

// Event types an endpoint can subscribe to. EventAll subscribes to all of them.
const (
	EventAll              = "*"
	EventEndpointDisabled = "webhook.endpoint_disabled"
	EventTest             = "webhook.test"
)

// EventTypes are the events endpoints may subscribe to: the job events of the outbox, and the
// notice that one of the organization's endpoints was disabled.
var EventTypes = []string{"job.queued", "job.started", "job.checkpoint", "job.completed", "job.failed",
	"job.stopped", "job.retrying", "job.stalled", "job.alert", "job.budget", EventEndpointDisabled,
	"deployment.deployed", "deployment.failed", "deployment.unloaded"}

// ErrNotFound is returned for an endpoint or delivery that does not exist for the caller's
// organization.
var ErrNotFound = errors.New("webhooks: not found")

// InvalidError is a request that breaks a rule: Field is the JSON pointer of what to change.
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Msg }

// Limits an organization can reach, as LimitError.Limit names them.
const (
	LimitEndpoints = "webhook-endpoints"
	LimitTests     = "webhook-tests"
)

// LimitError is a request past one of an organization's webhook limits: Max of them (per
// Window, for a rate). RetryAfter, for a rate, is when the window that is full ends.
type LimitError struct {
	Limit      string
	Max        int
	Window     time.Duration
	RetryAfter time.Duration
	// Scope says whose rate is full: "endpoint" or "organization".
	Scope string
}

func (e *LimitError) Error() string {
	if e.Limit == LimitTests {
		return fmt.Sprintf("this %s has had its %d test deliveries for this %s; try again in %d s",
			e.Scope, e.Max, e.Window, e.RetryAfterSeconds())
	}
	return fmt.Sprintf("the organization has %d webhook endpoints, its limit; delete one to register another", e.Max)
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up, at least 1.
func (e *LimitError) RetryAfterSeconds() int {
	return max(1, int((e.RetryAfter+time.Second-1)/time.Second))
}

// Endpoint is a registered webhook target.
type Endpoint struct {
	ID          string    `json:"id"`
	URL         string    `json:"url"`
	Events      []string  `json:"events"`
	Enabled     bool      `json:"enabled"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Secret is shown when the endpoint is created and when its secret is rotated, never
	// again.
	Secret string `json:"secret,omitempty"`
	// PreviousSecretExpiresAt is when the replaced secret stops signing, during a rotation.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
	DisabledReason          string     `json:"disabled_reason,omitempty"`
	DisabledAt              *time.Time `json:"disabled_at,omitempty"`
	// FailingSince is when the current run of failed deliveries began.
	FailingSince *time.Time `json:"failing_since,omitempty"`
	// DroppedDeliveries counts the events it was not sent because as many deliveries to it as
	// may wait were waiting already (its receiver answered nothing for long).
	DroppedDeliveries int64 `json:"dropped_deliveries,omitempty"`
}

// Patch changes an endpoint; nil fields stay as they are.
type Patch struct {
	URL          *string
	Events       []string
	Enabled      *bool
	Description  *string
	RotateSecret bool
}

// Attempt is one try at a delivery.
type Attempt struct {
	At           time.Time `json:"at"`
	ResponseCode int       `json:"response_code,omitempty"`
	LatencyMS    int64     `json:"latency_ms"`
	Error        string    `json:"error,omitempty"`
}

// Delivery is one message to one endpoint and what became of it.
type Delivery struct {
	ID        string `json:"id"`
	WebhookID string `json:"webhook_id"`
	MessageID string `json:"message_id"`
	Type      string `json:"type"`
	JobID     string `json:"job_id,omitempty"`
	Sequence  int64  `json:"sequence,omitempty"`
	// Status is pending (waiting for its turn or its next attempt), delivered, failed (the
	// schedule ran out, or 410), or skipped (the endpoint was disabled or deleted first).
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	ResponseCode  int        `json:"response_code,omitempty"`
	LatencyMS     int64      `json:"latency_ms,omitempty"`
	Error         string     `json:"error,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
	LastAttemptAt *time.Time `json:"last_attempt_at,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	AttemptLog    []Attempt  `json:"attempt_log"`
}
