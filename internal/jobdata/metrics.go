package jobdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/buger/jsonparser"
)

// Row is one row of prime-rl's metrics.jsonl — a step, a time and metric values — or a step's
// rows merged. Values stay as written (JSON), so every key survives as it was.
type Row map[string]json.RawMessage

// Step is the row's step (1-indexed, as prime-rl numbers them).
func (r Row) Step() int {
	s, err := strconv.Atoi(string(r["step"]))
	if err != nil {
		var f float64
		_ = json.Unmarshal(r["step"], &f) // 3.0 or 3e0, as some writers put it
		return int(f)
	}
	return s
}

// Time is the row's unix time in seconds, 0 when it has none.
func (r Row) Time() float64 {
	t, _ := strconv.ParseFloat(string(r["time"]), 64)
	return t
}

// Float is a metric's value, and whether it is a finite number.
func (r Row) Float(key string) (float64, bool) {
	raw, ok := r[key]
	if !ok || len(raw) == 0 || raw[0] == 'n' || raw[0] == '"' || raw[0] == '{' || raw[0] == '[' {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// NonFiniteKey holds, in a row, the metrics whose value was not a finite number (NaN,
// Infinity, or a number too large for a double): the value is stored as null and this
// object says what it was, so the step is kept and nothing is silently dropped.
const NonFiniteKey = "hostedtrain/nonfinite"

// MaxLineBytes is the longest metrics line the agent stores; a longer one is refused with a
// note in the job's log (a real row of prime-rl is some tens of kilobytes).
const MaxLineBytes = 1 << 20

// ErrLineTooLong is a metrics line over MaxLineBytes.
var ErrLineTooLong = errors.New("metrics line too long")

// ParseLine reads one line of metrics.jsonl. Python's json writes NaN, Infinity and -Infinity,
// which are not JSON: they become null, and so does a number too large for a double, each
// named under NonFiniteKey. A line without a step is an error.
func ParseLine(line []byte) (Row, error) {
	row, _, err := scanLine(line, nil)
	return row, err
}

// scanLine is ParseLine holding only the keys keep allows (all when keep is nil; step, time
// and NonFiniteKey always), and saying which process wrote the row, from all its keys. The
// line is read key by key (github.com/buger/jsonparser) without decoding what is not kept:
// a chart of one series over a long run reads a few keys of rows of hundreds.
func scanLine(line []byte, keep map[string]bool) (Row, string, error) {
	line = bytes.TrimSpace(line)
	if len(line) > MaxLineBytes {
		return nil, "", fmt.Errorf("%w: %d bytes, the limit is %d", ErrLineTooLong, len(line), MaxLineBytes)
	}
	clean, notes := replaceNonFinite(line)
	row := Row{}
	writer := "trainer"
	err := jsonparser.ObjectEach(clean, func(k, v []byte, t jsonparser.ValueType, end int) error {
		if writer == "trainer" && orchestratorKey(k) {
			writer = "orchestrator"
		}
		// string(k) in a comparison or a map index allocates nothing; a key is made only for
		// what is kept.
		if keep != nil && !keep[string(k)] && string(k) != "step" && string(k) != "time" && string(k) != NonFiniteKey {
			return nil
		}
		key := string(k)
		switch t {
		case jsonparser.String:
			v = clean[end-len(v)-2 : end] // the value with its quotes, as written
		case jsonparser.Number:
			if f, err := strconv.ParseFloat(string(v), 64); err != nil || math.IsInf(f, 0) {
				notes = append(notes, [2]string{key, string(v)})
				v = []byte("null")
			}
		}
		// The scan checks the line's shape, not what is inside a value; a value that is not
		// JSON would make every answer that carries it fail to encode.
		if t != jsonparser.Null && t != jsonparser.Boolean && !json.Valid(v) {
			return fmt.Errorf("the value of %q is not JSON", key)
		}
		row[key] = json.RawMessage(v)
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("metrics line: %w", err)
	}
	step, ok := row["step"]
	if !ok {
		return nil, "", errors.New("metrics line: no step")
	}
	if s, err := strconv.Atoi(string(step)); err != nil || s < 0 {
		return nil, "", fmt.Errorf("metrics line: step %s is not a whole number of 0 or more", step)
	}
	if len(notes) > 0 {
		m := map[string]string{}
		for _, n := range notes {
			m[n[0]] = n[1]
		}
		b, _ := json.Marshal(m)
		row[NonFiniteKey] = b
	}
	return row, writer, nil
}

// replaceNonFinite turns the bare tokens NaN, Infinity and -Infinity into null, outside
// strings, and names the top-level key each belonged to.
func replaceNonFinite(line []byte) ([]byte, [][2]string) {
	if !bytes.Contains(line, []byte("NaN")) && !bytes.Contains(line, []byte("Infinity")) {
		return line, nil
	}
	var out []byte
	var notes [][2]string
	inString, escaped, depth := false, false, 0
	key, keyStart, expectKey := "", -1, false
	for i := 0; i < len(line); i++ {
		c := line[i]
		if inString {
			out = append(out, c)
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if keyStart >= 0 {
					if k, err := strconv.Unquote(string(line[keyStart : i+1])); err == nil {
						key = k
					}
					keyStart = -1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
			if depth == 1 && expectKey {
				keyStart = i
				expectKey = false
			}
		case '{', '[':
			depth++
			expectKey = c == '{' && depth == 1
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		}
		if tok := nonFiniteToken(line[i:]); tok != "" {
			out = append(out, "null"...)
			notes = append(notes, [2]string{key, tok})
			i += len(tok) - 1
			continue
		}
		out = append(out, c)
	}
	return out, notes
}

func nonFiniteToken(b []byte) string {
	for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
		if bytes.HasPrefix(b, []byte(tok)) {
			return tok
		}
	}
	return ""
}

// orchestratorPrefixes start the keys only the orchestrator writes: episode and progress
// metrics. The trainer writes the rest.
var orchestratorPrefixes = [][]byte{[]byte("train/"), []byte("eval/"), []byte("progress/"), []byte("off_policy/"), []byte("batch/"), []byte("curriculum/")}

func orchestratorKey(k []byte) bool {
	for _, p := range orchestratorPrefixes {
		if bytes.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// TrainerRow says whether the trainer wrote a row (its rows carry no episode or progress
// metrics).
func TrainerRow(r Row) bool { return writerOf(r) == "trainer" }

// writerOf says which of prime-rl's processes wrote a row: the orchestrator's rows carry
// episode and progress metrics (train/, eval/, progress/, ...), the trainer's the rest.
func writerOf(r Row) string {
	for k := range r {
		if orchestratorKey([]byte(k)) {
			return "orchestrator"
		}
	}
	return "trainer"
}

// Merge joins the rows of one step (the trainer writes five, the orchestrator one, and one
// per evaluation) into one, keeping every key. A key both processes write (time/step,
// time/save_ckpt) keeps the trainer's value under its name and the orchestrator's under
// "orchestrator/<key>"; a later row of the same writer replaces its earlier value; time is
// the latest.
func Merge(rows []Row) Row {
	writers := make([]string, len(rows))
	for i, r := range rows {
		writers[i] = writerOf(r)
	}
	return merge(rows, writers)
}

// merge is Merge with each row's writer known (a row read in part cannot tell).
func merge(rows []Row, writers []string) Row {
	size := 0
	for _, r := range rows {
		size += len(r)
	}
	out := make(Row, size)
	from := map[string]string{}
	latest := 0.0
	for i, r := range rows {
		w := writers[i]
		for k, v := range r {
			switch k {
			case "time":
				if t := r.Time(); t >= latest {
					latest = t
					out[k] = v
				}
				continue
			case "step":
				out[k] = v
				continue
			case NonFiniteKey:
				out[k] = mergeNotes(out[k], v)
				continue
			}
			prev, seen := out[k]
			switch {
			case !seen || from[k] == w:
				out[k], from[k] = v, w
			case bytes.Equal(prev, v):
				if w == "trainer" { // the plain value is (also) the trainer's from now on
					from[k] = w
				}
			case w == "orchestrator":
				out["orchestrator/"+k] = v
			default: // the trainer's value takes the plain name
				out["orchestrator/"+k] = prev
				out[k], from[k] = v, w
			}
		}
	}
	return out
}

func mergeNotes(a, b json.RawMessage) json.RawMessage {
	m := map[string]string{}
	_ = json.Unmarshal(a, &m)
	_ = json.Unmarshal(b, &m)
	out, _ := json.Marshal(m)
	return out
}

// Series is a headline metric: one name the CLI, the dashboard and webhooks use for what
// prime-rl calls by one of its keys.
type Series struct {
	Name  string // reward, loss, ...
	Label string
	// Keys are prime-rl's names for it, in order of preference; a key may have one `*`,
	// which matches one path segment (the agent role, an environment).
	Keys []string
}

// Headline lists the headline series, in the order they are shown. The keys are prime-rl's
// at the pinned commit (src/prime_rl/orchestrator/metrics.py, trainer/rl/train.py), plus the
// series the agent derives from GEPA and eval results.
var Headline = []Series{
	{Name: "reward", Label: "Reward", Keys: []string{"train/agg/all/agent/reward/mean", "train/agg/all/*/reward/mean", "train/agg/effective/agent/reward/mean"}},
	{Name: "loss", Label: "Loss", Keys: []string{"loss/mean"}},
	{Name: "entropy", Label: "Entropy", Keys: []string{"entropy/all/mean"}},
	{Name: "kl", Label: "Mismatch KL", Keys: []string{"mismatch_kl/all/mean"}},
	{Name: "grad_norm", Label: "Grad norm", Keys: []string{"optim/grad_norm"}},
	{Name: "throughput", Label: "Throughput (tokens/s)", Keys: []string{"perf/throughput"}},
	{Name: "seq_len", Label: "Sequence length", Keys: []string{"train/agg/all/num_total_tokens/mean", "train/agg/all/*/num_total_tokens/mean"}},
	{Name: "lr", Label: "Learning rate", Keys: []string{"optim/lr"}},
	{Name: "eval_reward", Label: "Eval reward", Keys: []string{"eval/*/avg_reward", "eval/*/all/agent/reward/mean"}},
	{Name: "gepa_best", Label: "GEPA best score", Keys: []string{"gepa/best_score"}},
}

// SeriesByName finds a headline series.
func SeriesByName(name string) (Series, bool) {
	for _, s := range Headline {
		if s.Name == name {
			return s, true
		}
	}
	return Series{}, false
}

// match is the key of r a series key stands for ("" for none): itself, or for a key with a
// `*`, the first matching key in sorted order.
func match(r Row, key string) string {
	star := strings.IndexByte(key, '*')
	if star < 0 {
		if _, ok := r[key]; ok {
			return key
		}
		return ""
	}
	prefix, suffix := key[:star], key[star+1:]
	var found []string
	for k := range r {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, suffix) && len(k) > len(prefix)+len(suffix) &&
			!strings.Contains(k[len(prefix):len(k)-len(suffix)], "/") {
			found = append(found, k)
		}
	}
	if len(found) == 0 {
		return ""
	}
	sort.Strings(found)
	return found[0]
}

// Resolve maps each headline series r has a finite value for to the key that holds it.
func Resolve(r Row) map[string]string {
	out := map[string]string{}
	for _, s := range Headline {
		for _, k := range s.Keys {
			if m := match(r, k); m != "" {
				if _, ok := r.Float(m); ok {
					out[s.Name] = m
					break
				}
			}
		}
	}
	return out
}

// Summary follows a run's rows and keeps what a heartbeat carries: the newest trained step
// and the newest value of each headline series, by prime-rl's name. It is bounded: a row of
// hundreds of keys leaves at most one value per series.
type Summary struct {
	Step        int
	trainerStep int
	anyStep     int
	Values      map[string]float64 // prime-rl key → value
	Series      map[string]string  // series name → prime-rl key
	at          map[string]int     // series name → step of its value
}

// Add takes one row (as written, or merged).
func (s *Summary) Add(r Row) {
	if s.Values == nil {
		s.Values, s.Series, s.at = map[string]float64{}, map[string]string{}, map[string]int{}
	}
	step := r.Step()
	s.anyStep = max(s.anyStep, step)
	if writerOf(r) == "trainer" {
		s.trainerStep = max(s.trainerStep, step)
	}
	// The trainer's steps are the trained ones (the orchestrator runs ahead of it); a
	// pipeline that writes only one kind of row counts its steps.
	s.Step = s.trainerStep
	if s.Step == 0 {
		s.Step = s.anyStep
	}
	for name, key := range Resolve(r) {
		if step < s.at[name] {
			continue
		}
		if old, ok := s.Series[name]; ok && old != key {
			delete(s.Values, old)
		}
		v, _ := r.Float(key)
		s.Values[key], s.Series[name], s.at[name] = v, key, step
	}
}
