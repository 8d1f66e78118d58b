package gpuagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
)

// metricsTail follows prime-rl's metrics.jsonl, which grows by one JSON object a step.
type metricsTail struct {
	path    string
	offset  int64
	partial []byte // a line whose newline has not been written yet

	step   int
	latest map[string]float64
}

// sample is one step of metrics.jsonl.
type sample struct {
	step   int
	values map[string]float64
}

// read returns the steps appended since the last call and remembers the newest.
func (m *metricsTail) read() ([]sample, [][]byte, error) {
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if _, err := f.Seek(m.offset, io.SeekStart); err != nil {
		return nil, nil, err
	}
	chunk, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, err
	}
	m.offset += int64(len(chunk))
	data := append(m.partial, chunk...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		m.partial = data
		return nil, nil, nil
	}
	m.partial = bytes.Clone(data[last+1:])
	var out []sample
	var lines [][]byte
	for _, line := range bytes.Split(data[:last], []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(line, &raw); err != nil {
			continue // a line prime-rl did not finish cleanly; skip rather than stop
		}
		s := sample{values: map[string]float64{}}
		for k, v := range raw {
			f, ok := v.(float64)
			if !ok {
				continue
			}
			switch k {
			case "step":
				s.step = int(f)
			case "time":
			default:
				s.values[k] = f
			}
		}
		out = append(out, s)
		lines = append(lines, line)
		if s.step >= m.step {
			m.step, m.latest = s.step, s.values
		}
	}
	return out, lines, nil
}
