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
	// behind is set when a read stopped at maxTailRead before the end of the file.
	behind bool
}

// maxTailRead is the most a read takes of metrics.jsonl: the file on disk is the buffer, so a
// job that writes gigabytes at once does not have them held in the agent's memory.
const maxTailRead = 4 << 20

// maxNotes is how many notes on lines or rows not stored one read or one batch of rows gives
// one by one; the rest are counted in one more, so that a job writing a million bad lines
// does not write a million notes.
const maxNotes = 5

// tailNote is something wrong with a line, for the job's log.
type tailNote struct {
	offset int64
	err    error
}

// read returns the rows appended since the last call, up to maxTailRead of the file (behind
// says whether more is there), and what it could not take: a line that is not a row, or one
// longer than jobdata.MaxLineBytes (refused: it is skipped to its end, and never stored). A
// tail with no path reads nothing.
func (m *metricsTail) read() ([]jobdata.Row, []tailNote, error) {
	m.behind = false
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
	// Polled often, and most polls find nothing new: no read, and no buffer, then. The buffer
	// is what is new, up to 256 KiB (a fixed 256 KiB each poll was most of the agent's garbage).
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() <= m.offset {
		return nil, nil, nil
	}
	if _, err := f.Seek(m.offset, io.SeekStart); err != nil {
		return nil, nil, err
	}
	var rows []jobdata.Row
	var notes []tailNote
	more := 0
	buf := make([]byte, min(256<<10, max(4<<10, fi.Size()-m.offset)))
	for total := 0; ; {
		if total >= maxTailRead {
			m.behind = true
			return rows, capNotes(notes, more), nil
		}
		n, err := f.Read(buf)
		total += n
		if n > 0 {
			r, nt := m.take(buf[:n])
			rows = append(rows, r...)
			for _, x := range nt {
				if len(notes) < maxNotes {
					notes = append(notes, x)
				} else {
					more++
				}
			}
		}
		if err == io.EOF {
			return rows, capNotes(notes, more), nil
		}
		if err != nil {
			return rows, capNotes(notes, more), err
		}
	}
}

// capNotes adds to notes one that counts the more not given.
func capNotes(notes []tailNote, more int) []tailNote {
	if more > 0 {
		notes = append(notes, tailNote{offset: -1, err: fmt.Errorf("%d more lines not stored", more)})
	}
	return notes
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
	uploader *uploader       // nil for jobs without checkpoints
	rollouts *rolloutShipper // nil for jobs that do not run prime-rl's rl
	// trained is the highest step the trainer wrote a row for: its batch was shipped.
	trained int
	// ended is set once the run is over: every step's rollouts are as whole as they get.
	ended bool
}

// addRows takes rows into the summary and the metrics stream; it returns notes on rows that
// could not be stored (at most maxNotes and a count of the rest).
func (s *streams) addRows(rows []jobdata.Row) []string {
	var notes []string
	more := 0
	for _, r := range rows {
		s.summary.Add(r)
		if jobdata.TrainerRow(r) {
			s.trained = max(s.trained, r.Step())
		}
		if err := s.metrics.Add(r); err != nil {
			if len(notes) < maxNotes {
				notes = append(notes, err.Error())
			} else {
				more++
			}
		}
	}
	if more > 0 {
		notes = append(notes, fmt.Sprintf("%d more rows not stored", more))
	}
	return notes
}
