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

// read returns the lines appended since the last call (whole lines that parse) and
// remembers the newest step's values. A tail with no path (a pipeline that writes no
// metrics) reads nothing.
func (m *metricsTail) read() ([][]byte, error) {
	if m.path == "" {
		return nil, nil
	}
	f, err := os.Open(m.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(m.offset, io.SeekStart); err != nil {
		return nil, err
	}
	chunk, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	m.offset += int64(len(chunk))
	data := append(m.partial, chunk...)
	last := bytes.LastIndexByte(data, '\n')
	if last < 0 {
		m.partial = data
		return nil, nil
	}
	m.partial = bytes.Clone(data[last+1:])
	var lines [][]byte
	for _, line := range bytes.Split(data[:last], []byte{'\n'}) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var raw map[string]any
		if err := json.Unmarshal(line, &raw); err != nil {
			continue // a line prime-rl did not finish cleanly; skip rather than stop
		}
		step, values := 0, map[string]float64{}
		for k, v := range raw {
			f, ok := v.(float64)
			if !ok {
				continue
			}
			switch k {
			case "step":
				step = int(f)
			case "time":
			default:
				values[k] = f
			}
		}
		lines = append(lines, line)
		if step >= m.step {
			m.step, m.latest = step, values
		}
	}
	return lines, nil
}

func stepOf(line []byte) int {
	var s struct {
		Step int `json:"step"`
	}
	_ = json.Unmarshal(line, &s)
	return s.Step
}
