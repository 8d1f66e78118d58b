package gpuagent

import (
	"fmt"
	"sync"
)

// DefaultStorageTries is how many times a write to the job's storage is tried before the job
// fails (Config.StorageTries): with the uploads' backoff (0.5 s doubling, at most 30 s) about
// a minute and a half, with the flushes' about StorageTries flush intervals.
const DefaultStorageTries = 8

// storageFault is the job's storage refusing its writes for good (full, gone, forbidden): set
// once, by the first writer that gives up; the pipeline is then stopped and the job fails
// with the reason, rather than sitting RUNNING while retries go on forever.
type storageFault struct {
	once sync.Once
	ch   chan struct{}
	err  error
}

func newStorageFault() *storageFault { return &storageFault{ch: make(chan struct{})} }

func (s *storageFault) set(what string, tries int, err error) {
	s.once.Do(func() {
		s.err = fmt.Errorf("the job's storage refused its writes: %s could not be stored after %d tries (%v)", what, tries, err)
		close(s.ch)
	})
}

// failed is closed once the fault is set.
func (s *storageFault) failed() <-chan struct{} { return s.ch }

// get is the fault, nil if none.
func (s *storageFault) get() error {
	select {
	case <-s.ch:
		return s.err
	default:
		return nil
	}
}
