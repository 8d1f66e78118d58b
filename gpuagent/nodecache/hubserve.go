package nodecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// HubServer serves a folder of models as a Hugging Face-compatible hub (the two calls Hub
// makes): DIR/OWNER/NAME/FILES is the model OWNER/NAME, its one revision "main" a commit named
// by its files' hashes. A fleet without the internet mirrors its models so (`hostedtrain dev`
// and the tests serve the emulator's models this way). Files of 10 MiB or more are listed as
// LFS files with their sha256, smaller ones by their git blob id, as the hub does.
type HubServer struct {
	Dir string

	mu    sync.Mutex
	cache map[string]hubListing // by model, with the stamps it was made from
}

type hubListing struct {
	stamps string
	rev    hubRevision
}

// lfsFrom is the size from which the hub lists a file as LFS (with its sha256).
const lfsFrom = 10 << 20

func (s *HubServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/api/models/"); ok {
		model, rev, ok := strings.Cut(rest, "/revision/")
		if !ok || strings.Count(model, "/") != 1 || !safeRel(model) {
			http.NotFound(w, r)
			return
		}
		l, err := s.listing(model)
		if err != nil || (rev != "main" && rev != l.SHA) {
			http.Error(w, `{"error":"Repository Not Found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(l)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5) // owner, name, "resolve", commit, file
	if len(parts) != 5 || parts[2] != "resolve" || !safeRel(parts[4]) {
		http.NotFound(w, r)
		return
	}
	model := parts[0] + "/" + parts[1]
	l, err := s.listing(model)
	if err != nil || (parts[3] != l.SHA && parts[3] != "main") {
		http.NotFound(w, r)
		return
	}
	http.ServeFile(w, r, filepath.Join(s.Dir, model, parts[4]))
}

// listing lists a model's files with their hashes (again only when a file changed).
func (s *HubServer) listing(model string) (*hubRevision, error) {
	root := filepath.Join(s.Dir, model)
	var names []string
	var stamps strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		names = append(names, rel)
		stamps.WriteString(rel + "=" + stamp(fi) + ";")
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, os.ErrNotExist
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.cache[model]; ok && l.stamps == stamps.String() {
		return &l.rev, nil
	}
	sort.Strings(names)
	rev := hubRevision{}
	commit := sha256.New()
	for _, n := range names {
		fi, err := os.Stat(filepath.Join(root, n))
		if err != nil {
			return nil, err
		}
		in, err := os.Open(filepath.Join(root, n))
		if err != nil {
			return nil, err
		}
		sum, size, gitSum, err := hashes(in, fi.Size(), true)
		in.Close()
		if err != nil {
			return nil, err
		}
		f := hubFile{Name: n, BlobID: gitSum, Size: size}
		if size >= lfsFrom {
			f.LFS = &struct {
				SHA256 string `json:"sha256"`
				Size   int64  `json:"size"`
			}{sum, size}
		}
		rev.Siblings = append(rev.Siblings, f)
		commit.Write([]byte(n + "\x00" + sum + "\n"))
	}
	rev.SHA = hex.EncodeToString(commit.Sum(nil))[:40]
	if s.cache == nil {
		s.cache = map[string]hubListing{}
	}
	s.cache[model] = hubListing{stamps: stamps.String(), rev: rev}
	return &rev, nil
}
