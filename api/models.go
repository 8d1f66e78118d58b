package api

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// Model is a model the operator offers for training: its Hugging Face id, the GPUs (H100, on
// one node) an rl job of it takes unless the job says (num_gpus), and its price per GPU-hour
// (0: none said).
type Model struct {
	Name            string  `toml:"name" json:"name"`
	GPUs            int     `toml:"gpus" json:"gpus"`
	PricePerGPUHour float64 `toml:"price_per_gpu_hour" json:"price_per_gpu_hour,omitempty"`
}

// ParseModels reads an operator's list of models (HOSTEDTRAIN_MODELS, `hostedtrain dev
// --models`): one [[model]] table each, with name, gpus and optionally price_per_gpu_hour.
func ParseModels(data []byte) ([]Model, error) {
	var doc struct {
		Model []Model `toml:"model"`
	}
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("the models list: %w", err)
	}
	if len(doc.Model) == 0 {
		return nil, fmt.Errorf("the models list names no model: add [[model]] tables (name, gpus)")
	}
	seen := map[string]bool{}
	for i, m := range doc.Model {
		switch {
		case m.Name == "":
			return nil, fmt.Errorf("the models list: model %d has no name", i+1)
		case seen[m.Name]:
			return nil, fmt.Errorf("the models list names %s twice", m.Name)
		case m.GPUs < 1:
			return nil, fmt.Errorf("the models list: %s needs gpus (at least 1)", m.Name)
		case m.PricePerGPUHour < 0:
			return nil, fmt.Errorf("the models list: %s has a negative price", m.Name)
		}
		seen[m.Name] = true
	}
	return doc.Model, nil
}

// models are what GET /v1/models lists: the operator's list, or without one the models
// prime-rl renders by itself whose size hostedtrain knows and which fit a node, with the GPUs
// an rl job of each takes by default (jobspec.TrainingGPUs).
func (s *Server) models() []Model {
	if s.cfg.Models != nil {
		return s.cfg.Models
	}
	var out []Model
	for _, m := range upstream.RenderedModels() {
		if g, ok := jobspec.TrainingGPUs(m); ok {
			out = append(out, Model{Name: m, GPUs: g})
		}
	}
	return out
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	list, prob := s.modelList(r)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// modelList is what GET /v1/models answers: the models offered, each with the nodes idle for
// it now.
func (s *Server) modelList(r *http.Request) (*wire.ModelList, *Problem) {
	models := s.models()
	counts := make([]int, len(models))
	for i, m := range models {
		counts[i] = m.GPUs
	}
	idle, err := s.cfg.Queue.IdleCapacity(r.Context(), jobspec.DefaultGPUType, counts)
	if err != nil {
		return nil, s.failure(r, err)
	}
	list := wire.ModelList{Items: []wire.Model{}, OperatorList: s.cfg.Models != nil}
	for i, m := range models {
		it := wire.Model{Name: m.Name, GPUs: m.GPUs, PricePerGPUHour: m.PricePerGPUHour, IdleNodes: idle[i]}
		if choice, err := upstream.ChooseRenderer(m.Name, ""); err == nil {
			it.Renderer = choice.Name
		}
		list.Items = append(list.Items, it)
	}
	return &list, nil
}

// offered checks a training job's model against the operator's list, if there is one: a model
// not on it is refused, naming the list; one the list sizes beyond a node cannot be placed;
// and a job that does not say its GPUs takes the list's.
func (s *Server) offered(a *admitted) *Problem {
	if s.cfg.Models == nil || !jobspec.RunsPrimeRL(a.spec.Kind) {
		return nil
	}
	ptr := "/model"
	if a.spec.Kind == jobspec.KindFFT {
		ptr = "/model/name"
	}
	var m *Model
	names := make([]string, 0, len(s.cfg.Models))
	for i := range s.cfg.Models {
		names = append(names, s.cfg.Models[i].Name)
		if s.cfg.Models[i].Name == a.spec.Model {
			m = &s.cfg.Models[i]
		}
	}
	refuse := func(format string, args ...any) *Problem {
		fe := FieldError{Pointer: ptr, Message: fmt.Sprintf(format, args...)}
		a.body.place(&fe)
		return invalidJob([]FieldError{fe}, a.body)
	}
	switch {
	case m == nil:
		return refuse("%s is not offered here; the models offered are %s (`hostedtrain train models`)", a.spec.Model, strings.Join(names, ", "))
	case m.GPUs > upstream.GPUsPerNode:
		return refuse("%s takes %d GPUs here, more than a node has (%d): it cannot be placed", m.Name, m.GPUs, upstream.GPUsPerNode)
	}
	if a.spec.Kind == jobspec.KindRL && !a.gpusSaid {
		tp := 0
		if a.spec.Parallelism != nil {
			tp = a.spec.Parallelism.TensorParallelSize
		}
		if _, err := upstream.SplitGPUs(m.GPUs, tp); err != nil {
			return refuse("%s takes %d GPUs here, which its tensor_parallel_size cannot split: %v", m.Name, m.GPUs, err)
		}
		if _, known, err := a.spec.Layout(m.GPUs); known && err != nil {
			return refuse("%s takes %d GPUs here, on which this job does not fit: %v", m.Name, m.GPUs, err)
		}
		a.spec.Resources.GPUs = m.GPUs
	}
	return nil
}

// listGPUs is GET /v1/gpus: the one GPU type this service places jobs on, a node's worth, and
// the idle nodes now by GPUs free.
func (s *Server) listGPUs(w http.ResponseWriter, r *http.Request) {
	gpus, prob := s.gpuTypes(r)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": gpus})
}

// gpuTypes are the GPU types jobs run on (GET /v1/gpus): the one this service places jobs on,
// with the idle nodes now by GPUs free.
func (s *Server) gpuTypes(r *http.Request) ([]wire.GPUType, *Problem) {
	counts := make([]int, upstream.GPUsPerNode)
	for i := range counts {
		counts[i] = i + 1
	}
	idle, err := s.cfg.Queue.IdleCapacity(r.Context(), jobspec.DefaultGPUType, counts)
	if err != nil {
		return nil, s.failure(r, err)
	}
	return []wire.GPUType{{GPUType: jobspec.DefaultGPUType, PerNode: upstream.GPUsPerNode, IdleNodes: idle}}, nil
}
