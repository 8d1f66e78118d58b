package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// Short-lived download links for checkpoint files and artifacts. A store that can sign its own
// (S3) hands out presigned URLs; for one that cannot (the local stack's folder) the API signs a
// token naming the object and its expiry, and serves GET /v1/downloads/{token} without any
// other credential.

// downloadTTL is how long a download link works.
const downloadTTL = 15 * time.Minute

// downloadURL is a link that downloads key until expires.
func (s *Server) downloadURL(ctx context.Context, r *http.Request, key string, expires time.Time) (string, error) {
	if p, ok := s.cfg.Store.(blob.Presigner); ok {
		return p.PresignGet(ctx, key, time.Until(expires))
	}
	payload := strconv.FormatInt(expires.Unix(), 10) + "\n" + key
	token := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(s.downloadMAC(payload))
	return publicBase(r) + "/v1/downloads/" + token, nil
}

func (s *Server) downloadMAC(payload string) []byte {
	m := hmac.New(sha256.New, s.downloadKey)
	m.Write([]byte("hostedtrain-download\n" + payload))
	return m.Sum(nil)
}

// errBadToken is a download token that is not ours, or has expired.
var errBadToken = errors.New("bad token")

func (s *Server) openToken(token string, now time.Time) (string, error) {
	p64, mac64, ok := strings.Cut(token, ".")
	if !ok {
		return "", errBadToken
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	mac, err2 := base64.RawURLEncoding.DecodeString(mac64)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.downloadMAC(string(payload))) {
		return "", errBadToken
	}
	exp, key, ok := strings.Cut(string(payload), "\n")
	sec, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil {
		return "", errBadToken
	}
	if now.After(time.Unix(sec, 0)) {
		return "", fmt.Errorf("%w: it expired at %s", errBadToken, time.Unix(sec, 0).UTC().Format(time.RFC3339))
	}
	return key, nil
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	if !s.storeReady(w, r) {
		return
	}
	key, err := s.openToken(pathParam(r, "token"), time.Now())
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusForbidden, "bad-download-link",
			"this download link is not valid ("+err.Error()+"); ask the API for a fresh one"))
		return
	}
	rc, err := s.cfg.Store.Get(r.Context(), key)
	if errors.Is(err, blob.ErrNotFound) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "object-not-found", "the object is gone (a newer checkpoint replaced it)"))
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(key)))
	w.Header().Set("Cache-Control", "private, no-store")
	_, _ = io.Copy(w, rc)
}
