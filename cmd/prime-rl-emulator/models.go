package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// Prime's inference service, where verifiers sends model calls when it is not told
// otherwise (verifiers/legacy/scripts/eval.py, PROVIDER_CONFIGS["prime"]).
const (
	primeInferenceURL = "https://api.pinference.ai/api/v1"
	primeKeyVar       = "PRIME_API_KEY"
)

// modelClient calls one model behind an OpenAI-compatible API, as verifiers' client does:
// the key from the named variable, the base URL as given.
type modelClient struct {
	baseURL, keyVar, model string
	http                   *http.Client
}

func newModelClient(baseURL, keyVar, model string) *modelClient {
	if baseURL == "" {
		baseURL = primeInferenceURL
	}
	if keyVar == "" {
		keyVar = primeKeyVar
	}
	return &modelClient{baseURL: strings.TrimRight(baseURL, "/"), keyVar: keyVar, model: model, http: &http.Client{Timeout: 10 * time.Second}}
}

// check is the first call: the key is set and the server knows the model.
func (c *modelClient) check(ctx context.Context) error {
	key := os.Getenv(c.keyVar)
	if key == "" {
		return fmt.Errorf("openai.OpenAIError: The api_key client option must be set either by passing api_key to the client or by setting the %s environment variable", c.keyVar)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/models", nil, &list); err != nil {
		return err
	}
	for _, m := range list.Data {
		if m.ID == c.model {
			return nil
		}
	}
	return fmt.Errorf("openai.NotFoundError: model %q is not served at %s", c.model, c.baseURL)
}

// key is the API key, as verifiers' client sets it: the variable's value, or "EMPTY" when
// it is unset (verifiers/legacy/utils/client_utils.py).
func (c *modelClient) key() string {
	if k := os.Getenv(c.keyVar); k != "" {
		return k
	}
	return "EMPTY"
}

// errAuth is a refused key: verifiers lets it end the run, where other model errors are
// stored on their rollout (clients/client.py).
type errAuth struct{ error }

// complete asks the model once.
func (c *modelClient) complete(ctx context.Context, prompt string) error {
	body := map[string]any{"model": c.model, "messages": []map[string]string{{"role": "user", "content": prompt}}}
	return c.do(ctx, http.MethodPost, "/chat/completions", body, nil)
}

func (c *modelClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.key())
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("openai.APIConnectionError: %s %s: %v", method, c.baseURL+path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		return errAuth{fmt.Errorf("openai.AuthenticationError: Error code: %d - %s", resp.StatusCode, strings.TrimSpace(string(data)))}
	}
	if resp.StatusCode >= 400 {
		return fmt.Errorf("openai.APIStatusError: Error code: %d - %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
