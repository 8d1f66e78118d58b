package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// storeContract is what every backend must do the same way.
func storeContract(t *testing.T, d blob.Store) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []string{"jobs/a/x.txt", "jobs/a/sub/y.txt", "jobs/b/z.txt", "jobs/ab/w.txt"} {
		if err := d.Put(ctx, k, strings.NewReader("data of "+k)); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := d.Get(ctx, "jobs/a/sub/y.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "data of jobs/a/sub/y.txt" {
		t.Errorf("got %q", b)
	}
	objs, err := d.List(ctx, "jobs/a/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].Key != "jobs/a/sub/y.txt" || objs[1].Key != "jobs/a/x.txt" || objs[1].Size != int64(len("data of jobs/a/x.txt")) {
		t.Errorf("list: %+v", objs)
	}
	if objs[0].Modified.IsZero() {
		t.Error("list gives no modification time")
	}
	if objs, err := d.List(ctx, "jobs/none/"); err != nil || len(objs) != 0 {
		t.Errorf("list of a missing prefix: %v, %v", objs, err)
	}
	// Overwriting replaces the whole object.
	if err := d.Put(ctx, "jobs/a/x.txt", strings.NewReader("new")); err != nil {
		t.Fatal(err)
	}
	if got := read(t, d, "jobs/a/x.txt"); got != "new" {
		t.Errorf("after overwrite: %q", got)
	}
	if err := d.Delete(ctx, "jobs/a/x.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, "jobs/a/x.txt"); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	if err := d.Delete(ctx, "jobs/a/x.txt"); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
	for _, k := range []string{"/abs", "", "a//b"} {
		if err := d.Put(ctx, k, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) succeeded", k)
		}
	}
}

func read(t *testing.T, d blob.Store, key string) string {
	t.Helper()
	rc, err := d.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDirStore(t *testing.T) {
	t.Parallel()
	d, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	storeContract(t, d)
}

func TestS3Store(t *testing.T) {
	t.Parallel()
	st, _ := s3test.Store(t)
	storeContract(t, st)
}

func TestDirRefusesKeysOutsideItsRoot(t *testing.T) {
	t.Parallel()
	d, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"../escape", "jobs/../../x"} {
		if err := d.Put(context.Background(), k, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) succeeded", k)
		}
	}
}

// A checkpoint-sized object goes up as a multipart upload and comes back byte for byte; the
// aws CLI, a client that is not ours, reads the same bytes and lists the same keys.
func TestS3MultipartUploadReadBackWithAWSCLI(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config("multipart")
	cfg.PartSize = 5 << 20
	cfg.Prefix = "deploy-a/"
	ctx := context.Background()
	if _, err := srv.CreateBucket(ctx, "multipart"); err != nil {
		t.Fatal(err)
	}
	st, err := blob.NewS3(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 23<<20+12345) // five parts, the last one short
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	// A plain reader (no Seek), as the checkpoint uploader passes one through its hash.
	err = st.Put(ctx, "jobs/j1/checkpoints/step_10/trainer/model.safetensors", io.TeeReader(fh, io.Discard))
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got := read(t, st, "jobs/j1/checkpoints/step_10/trainer/model.safetensors"); sha256.Sum256([]byte(got)) != sha256.Sum256(data) {
		t.Fatal("the object read back differs from what was uploaded")
	}
	// The same file from its offsets (PutAt: the parts read straight from the file, several at
	// once), tagged as Put tags it.
	fh, err = os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	atKey := "jobs/j1/checkpoints/step_20/trainer/model.safetensors"
	if err := st.PutAt(ctx, atKey, fh, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if got := read(t, st, atKey); sha256.Sum256([]byte(got)) != sha256.Sum256(data) {
		t.Fatal("the object PutAt stored differs from the file")
	}
	tags, err := st.Client().GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String("multipart"), Key: aws.String("deploy-a/" + atKey)})
	if err != nil || len(tags.TagSet) != 1 || aws.ToString(tags.TagSet[0].Value) != "checkpoints" {
		t.Errorf("PutAt's tags %v (%v), want hostedtrain-kind=checkpoints", tags, err)
	}
	// A part that cannot be read fails the upload, which is aborted: nothing is stored.
	failKey := "jobs/j1/checkpoints/step_30/trainer/model.safetensors"
	if err := st.PutAt(ctx, failKey, failingAt{fh, 11 << 20}, int64(len(data))); err == nil {
		t.Fatal("PutAt of a file that fails to read: no error")
	}
	if _, err := st.Get(ctx, failKey); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("a failed PutAt left an object: %v", err)
	}
	// The multipart uploads left no parts behind, and the object is what S3 says it is.
	if ups, err := st.Client().ListMultipartUploads(ctx, listUploads("multipart")); err != nil || len(ups.Uploads) != 0 {
		t.Errorf("multipart uploads left open: %v %v", ups, err)
	}

	aws := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("aws", append([]string{"--endpoint-url", srv.Endpoint}, args...)...)
		cmd.Env = append(os.Environ(), srv.Env()...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("aws %s: %v: %s", strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	back := filepath.Join(t.TempDir(), "back")
	aws("s3", "cp", "--only-show-errors", "s3://multipart/deploy-a/jobs/j1/checkpoints/step_10/trainer/model.safetensors", back)
	got, err := os.ReadFile(back)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("aws s3 cp read %d bytes that differ from the %d uploaded", len(got), len(data))
	}
	ls := string(aws("s3", "ls", "--recursive", "s3://multipart/deploy-a/jobs/j1/"))
	if !strings.Contains(ls, "checkpoints/step_10/trainer/model.safetensors") || !strings.Contains(ls, " 24129593 ") {
		t.Errorf("aws s3 ls: %s", ls)
	}
}

// failingAt reads as its file does, but fails every read at or past an offset.
type failingAt struct {
	f   io.ReaderAt
	bad int64
}

func (r failingAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > r.bad {
		return 0, errors.New("disk error")
	}
	return r.f.ReadAt(p, off)
}

func TestS3PresignedDownload(t *testing.T) {
	t.Parallel()
	st, _ := s3test.Store(t)
	ctx := context.Background()
	if err := st.Put(ctx, "jobs/j1/artifacts/best_prompt.txt", strings.NewReader("You are precise.")); err != nil {
		t.Fatal(err)
	}
	u, err := st.PresignGet(ctx, "jobs/j1/artifacts/best_prompt.txt", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u) // no credentials: the URL carries them
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "You are precise." {
		t.Fatalf("GET presigned URL: %d %q", resp.StatusCode, b)
	}
	tampered := strings.Replace(u, "best_prompt", "other", 1)
	resp, err = http.Get(tampered)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a URL changed after signing answered %d, want 403", resp.StatusCode)
	}
}

func TestParseS3URL(t *testing.T) {
	t.Parallel()
	c, err := blob.ParseS3URL("s3://ckpts/prod/eu?endpoint=http://127.0.0.1:7070&region=eu-west-1&part_size_mib=64")
	if err != nil {
		t.Fatal(err)
	}
	if c.Bucket != "ckpts" || c.Prefix != "prod/eu/" || c.Endpoint != "http://127.0.0.1:7070" || c.Region != "eu-west-1" || c.PartSize != 64<<20 {
		t.Errorf("got %+v", c)
	}
	for _, bad := range []string{"ckpts", "s3:///x", "http://b/x", "s3://b?part_size_mib=1"} {
		if _, err := blob.ParseS3URL(bad); err == nil {
			t.Errorf("ParseS3URL(%q) accepted", bad)
		}
	}
}

func listUploads(bucket string) *s3.ListMultipartUploadsInput {
	return &s3.ListMultipartUploadsInput{Bucket: &bucket}
}

// Objects are tagged with what they are, for the bucket's lifecycle rules (old checkpoints
// expire; logs and metrics stay).
func TestS3TagsObjectsByKind(t *testing.T) {
	t.Parallel()
	st, _ := s3test.Store(t)
	ctx := context.Background()
	cases := map[string]string{
		blob.JobPrefix("j1") + "checkpoints/step_10/trainer/__0_0.distcp": "checkpoints",
		blob.JobPrefix("j1") + "metrics/000001-00000001-open-0001.jsonl":  "metrics",
		blob.JobPrefix("j1") + "logs/attempt_1/trainer/000000000000.log":  "logs",
		blob.JobPrefix("j1") + "artifacts/results.jsonl":                  "artifacts",
		"elsewhere/x": "",
	}
	for key, want := range cases {
		if err := st.Put(ctx, key, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		out, err := st.Client().GetObjectTagging(ctx, &s3.GetObjectTaggingInput{Bucket: aws.String(st.Bucket()), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, tag := range out.TagSet {
			if aws.ToString(tag.Key) == "hostedtrain-kind" {
				got = aws.ToString(tag.Value)
			}
		}
		if got != want {
			t.Errorf("%s: tag %q, want %q", key, got, want)
		}
	}
}
