package main

import (
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendJSON appends the record as encoding/json would write it (the test holds the two to the
// same bytes), without reflection: a chaos run's emulators write thousands of these a second,
// and reflecting over a record's hundreds of token ids was most of their CPU.
func (t *wireTrace) appendJSON(b []byte) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(t.Version), 10)
	b = appendField(b, "id")
	b = appendString(b, t.ID)
	b = appendField(b, "verifiers")
	b = append(b, t.Verifiers...)
	b = append(b, `,"task":{"type":`...)
	b = appendString(b, t.Task.Type)
	b = appendField(b, "data")
	b = append(b, t.Task.Data...)
	b = appendField(b, "key")
	b = appendString(b, t.Task.Key)
	b = appendField(b, "hash")
	b = appendString(b, t.Task.Hash)
	b = append(b, '}')
	b = appendField(b, "agent")
	b = append(b, t.Agent...)
	b = appendField(b, "tools")
	b = append(b, t.Tools...)
	b = append(b, `,"nodes":[`...)
	for i := range t.Nodes {
		if i > 0 {
			b = append(b, ',')
		}
		b = t.Nodes[i].appendJSON(b)
	}
	b = append(b, `],"calls":[`...)
	for i, c := range t.Calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"node":`...)
		b = strconv.AppendInt(b, int64(c.Node), 10)
		b = appendField(b, "model")
		b = appendString(b, c.Model)
		b = append(b, `,"sampling":null,"endpoint":`...)
		b = appendString(b, c.Endpoint)
		b = appendField(b, "finish_reason")
		b = appendString(b, c.FinishReason)
		b = append(b, `,"usage":{"prompt_tokens":`...)
		b = strconv.AppendInt(b, int64(c.Usage.PromptTokens), 10)
		b = append(b, `,"completion_tokens":`...)
		b = strconv.AppendInt(b, int64(c.Usage.CompletionTokens), 10)
		b = append(b, `,"cached_input_tokens":null,"reasoning_tokens":null,"cost":null},"time":`...)
		b = appendSpan(b, c.Time)
		b = append(b, `,"error":null,"policy":null}`...)
	}
	b = append(b, `],"request_rewrites":`...)
	b = append(b, t.RequestRewrites...)
	b = appendField(b, "response_rewrites")
	b = append(b, t.ResponseRewrites...)
	b = append(b, `,"rewards":{`...)
	for i, name := range slices.Sorted(maps.Keys(t.Rewards)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, name)
		b = append(b, `:{"score":`...)
		b = appendFloat(b, t.Rewards[name].Score)
		b = append(b, `,"weight":`...)
		b = appendFloat(b, t.Rewards[name].Weight)
		b = append(b, '}')
	}
	b = append(b, '}')
	b = appendField(b, "metrics")
	b = append(b, t.Metrics...)
	b = appendField(b, "info")
	b = append(b, t.Info...)
	b = appendField(b, "extra_usage")
	b = append(b, t.ExtraUsage...)
	b = append(b, `,"is_completed":`...)
	b = strconv.AppendBool(b, t.IsCompleted)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, t.OK)
	b = appendField(b, "stop_condition")
	b = appendString(b, t.StopCondition)
	b = appendField(b, "errors")
	b = append(b, t.Errors...)
	tm := t.Timing
	b = append(b, `,"timing":{"start":`...)
	b = appendFloat(b, tm.Start)
	b = append(b, `,"boot":`...)
	b = appendSpan(b, tm.Boot)
	b = append(b, `,"setup":`...)
	b = appendSpan(b, tm.Setup)
	b = append(b, `,"agent":{"start":`...)
	b = appendFloat(b, tm.Agent.Start)
	b = append(b, `,"end":`...)
	b = appendFloat(b, tm.Agent.End)
	b = append(b, `,"model":{"duration":`...)
	b = appendFloat(b, tm.Agent.Model.Duration)
	b = append(b, `},"harness":{"duration":`...)
	b = appendFloat(b, tm.Agent.Harness.Duration)
	b = append(b, `}},"finalize":`...)
	b = appendSpan(b, tm.Finalize)
	b = append(b, `,"scoring":`...)
	b = appendSpan(b, tm.Scoring)
	return append(b, `}}`...)
}

func (n *wireNode) appendJSON(b []byte) []byte {
	b = append(b, `{"parent":`...)
	if n.Parent == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*n.Parent), 10)
	}
	b = append(b, `,"message":`...)
	switch m := n.Message.(type) {
	case textMessage:
		b = append(b, `{"role":`...)
		b = appendString(b, m.Role)
		b = appendField(b, "content")
		b = appendString(b, m.Content)
		b = append(b, '}')
	case assistantMessage:
		b = append(b, `{"role":`...)
		b = appendString(b, m.Role)
		b = appendField(b, "content")
		b = appendString(b, m.Content)
		b = append(b, `,"reasoning_content":null,"tool_calls":null,"provider_state":null}`...)
	default:
		panic("emulator: a node's message is a textMessage or an assistantMessage")
	}
	b = append(b, `,"sampled":`...)
	b = strconv.AppendBool(b, n.Sampled)
	b = append(b, `,"timestamp":`...)
	b = appendFloat(b, n.Timestamp)
	b = append(b, `,"token_ids":`...)
	b = appendList(b, n.TokenIDs, func(b []byte, v int) []byte { return strconv.AppendInt(b, int64(v), 10) })
	b = append(b, `,"mask":`...)
	b = appendList(b, n.Mask, strconv.AppendBool)
	b = append(b, `,"is_content":`...)
	b = appendList(b, n.IsContent, strconv.AppendBool)
	b = append(b, `,"logprobs":`...)
	b = appendList(b, n.Logprobs, appendFloat)
	return append(b, `,"advantages":null,"reference_logprobs":null,"loss_weights":null}`...)
}

func appendField(b []byte, name string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	return append(b, '"', ':')
}

func appendSpan(b []byte, s span) []byte {
	b = append(b, `{"start":`...)
	b = appendFloat(b, s.Start)
	b = append(b, `,"end":`...)
	b = appendFloat(b, s.End)
	return append(b, '}')
}

// appendList writes a nil slice as null, as encoding/json does.
func appendList[T any](b []byte, a []T, one func([]byte, T) []byte) []byte {
	if a == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = one(b, v)
	}
	return append(b, ']')
}

// appendFloat is encoding/json's float64: the shortest form, with an exponent only below 1e-6
// or from 1e21, written e-7 rather than e-07.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendString is encoding/json's string with HTML escaping: ", \ and control characters
// escaped, <, > and & as \u003c…, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
