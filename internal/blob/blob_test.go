package blob

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDirPutGetListDelete(t *testing.T) {
	t.Parallel()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"jobs/a/x.txt", "jobs/a/sub/y.txt", "jobs/b/z.txt"} {
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
	if objs, err := d.List(ctx, "jobs/none/"); err != nil || len(objs) != 0 {
		t.Errorf("list of a missing prefix: %v, %v", objs, err)
	}
	if err := d.Delete(ctx, "jobs/a/x.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, "jobs/a/x.txt"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v, want ErrNotFound", err)
	}
	if err := d.Delete(ctx, "jobs/a/x.txt"); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
}

func TestDirRefusesKeysOutsideItsRoot(t *testing.T) {
	t.Parallel()
	d, err := NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"../escape", "jobs/../../x", "/abs", "", "a//b"} {
		if err := d.Put(context.Background(), k, strings.NewReader("x")); err == nil {
			t.Errorf("Put(%q) succeeded", k)
		}
	}
}

func TestManifestStep(t *testing.T) {
	t.Parallel()
	if s, ok := ManifestStep(CheckpointPrefix("j1", 40) + ManifestName); !ok || s != 40 {
		t.Errorf("got %d %v", s, ok)
	}
	if _, ok := ManifestStep("jobs/j1/checkpoints/step_40/trainer/model.safetensors"); ok {
		t.Error("a weights file read as a manifest")
	}
}
