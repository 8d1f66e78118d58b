package gpuagent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// metricsTail follows prime-rl's metrics.jsonl, to which the trainer and the orchestrator
// both append rows (several a step), and turns each whole line into a row.
type metricsTail struct {
	path    string
	offset  int64
	partial []byte // a line whose newline has not been written yet
	// skipping is set while the rest of an over-long line is being passed over.
	skipping bool
}

// tailNote is something wrong with a line, for the job's log.
type tailNote struct {
	offset int64
	err    error
}

// read returns the rows appended since the last call, and what it could not take: a line
// that is not a row, or one longer than jobdata.MaxLineBytes (refused: it is skipped to its
// end, and never stored). A tail with no path reads nothing.
func (m *metricsTail) read() ([]jobdata.Row, []tailNote, error) {
	if m.path == "" {
		return nil, nil, nil
	}
	f, err := nolink.Open(m.path)
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
	var rows []jobdata.Row
	var notes []tailNote
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			r, nt := m.take(buf[:n])
			rows, notes = append(rows, r...), append(notes, nt...)
		}
		if err == io.EOF {
			return rows, notes, nil
		}
		if err != nil {
			return rows, notes, err
		}
	}
}

func (m *metricsTail) take(data []byte) ([]jobdata.Row, []tailNote) {
	var rows []jobdata.Row
	var notes []tailNote
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if !m.skipping {
				m.partial = append(m.partial, data...)
				if len(m.partial) > jobdata.MaxLineBytes {
					notes = append(notes, tailNote{offset: m.offset - int64(len(m.partial)-len(data)), err: fmt.Errorf("%w: longer than %d bytes", jobdata.ErrLineTooLong, jobdata.MaxLineBytes)})
					m.partial, m.skipping = nil, true
				}
			}
			m.offset += int64(len(data))
			return rows, notes
		}
		line := data[:i]
		start := m.offset - int64(len(m.partial))
		m.offset += int64(i + 1)
		data = data[i+1:]
		if m.skipping {
			m.skipping = false
			continue
		}
		whole := append(m.partial, line...)
		m.partial = nil
		if len(bytes.TrimSpace(whole)) == 0 {
			continue
		}
		row, err := jobdata.ParseLine(whole)
		if err != nil {
			notes = append(notes, tailNote{offset: start, err: err})
			continue
		}
		rows = append(rows, row)
	}
	return rows, notes
}

// streams is a job's data on its way to storage: metrics rows (and their summary for the
// heartbeats), log files, and checkpoints.
type streams struct {
	tail     metricsTail
	metrics  *jobdata.MetricsWriter
	summary  jobdata.Summary
	logs     *jobdata.LogShipper
	uploader *uploader // nil for jobs without checkpoints
}

// addRows takes rows into the summary and the metrics stream; it returns notes on rows that
// could not be stored.
func (s *streams) addRows(rows []jobdata.Row) []string {
	var notes []string
	for _, r := range rows {
		s.summary.Add(r)
		if err := s.metrics.Add(r); err != nil {
			notes = append(notes, err.Error())
		}
	}
	return notes
}
