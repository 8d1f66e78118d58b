package grant_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/hostedtrain/hostedtrain/internal/grant"
	"github.com/hostedtrain/hostedtrain/internal/mototest"
)

const jobID = "01936b2e-8f7a-7c3e-9d1a-2b3c4d5e6f70"

func TestSTSGrantAgainstMoto(t *testing.T) {
	t.Parallel()
	moto := mototest.Start(t)
	g := &grant.STS{
		Client:  sts.NewFromConfig(moto.AWSConfig()),
		RoleARN: "arn:aws:iam::123456789012:role/hostedtrain-agent-storage",
		Bucket:  "ht-data", Prefix: "prod/", Region: "eu-west-1",
		KMSKeyARN: "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
		Duration:  30 * time.Minute,
	}
	before := time.Now()
	sg, err := g.Grant(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	if sg.Bucket != "ht-data" || sg.Prefix != "prod/" || sg.Region != "eu-west-1" {
		t.Errorf("grant locates %q %q %q", sg.Bucket, sg.Prefix, sg.Region)
	}
	if sg.AccessKeyID == "" || sg.SecretAccessKey == "" || sg.SessionToken == "" {
		t.Errorf("grant has no temporary credentials: %+v", sg)
	}
	if left := sg.Expiration.Sub(before); left < 29*time.Minute || left > 31*time.Minute {
		t.Errorf("credentials expire in %v, want 30m", left)
	}
	if _, err := g.Grant(context.Background(), "../other"); err == nil {
		t.Error("a job id that is not one was granted")
	}
}

func TestSessionPolicyReachesOneJob(t *testing.T) {
	t.Parallel()
	doc, err := grant.SessionPolicy("ht-data", "prod/", "arn:aws:kms:eu-west-1:123456789012:key/k", jobID)
	if err != nil {
		t.Fatal(err)
	}
	// AWS refuses session policies over 2,048 characters.
	if len(doc) > 2048 {
		t.Errorf("session policy is %d characters", len(doc))
	}
	var p struct {
		Statement []struct {
			Sid       string
			Effect    string
			Action    []string
			Resource  []string
			Condition map[string]map[string]any
		}
	}
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	want := "prod/jobs/" + jobID + "/"
	for _, s := range p.Statement {
		if s.Effect != "Allow" {
			t.Errorf("%s: effect %s", s.Sid, s.Effect)
		}
		for _, a := range s.Action {
			if strings.Contains(a, "*") || a == "s3:PutBucketPolicy" || a == "s3:PutObjectAcl" {
				t.Errorf("%s allows %s", s.Sid, a)
			}
		}
		switch s.Sid {
		case "JobObjects":
			if len(s.Resource) != 1 || s.Resource[0] != "arn:aws:s3:::ht-data/"+want+"*" {
				t.Errorf("objects reachable: %v", s.Resource)
			}
		case "JobListing":
			prefixes, _ := s.Condition["StringLike"]["s3:prefix"].([]any)
			if len(prefixes) != 2 || prefixes[0] != want || prefixes[1] != want+"*" {
				t.Errorf("listing allowed for %v", s.Condition)
			}
		case "BucketKey":
			if s.Condition["StringEquals"]["kms:ViaService"] != "s3.amazonaws.com" {
				t.Errorf("the key is usable outside S3: %v", s.Condition)
			}
		default:
			t.Errorf("unexpected statement %s", s.Sid)
		}
	}
	if len(p.Statement) != 3 {
		t.Errorf("%d statements", len(p.Statement))
	}
}

func TestStaticGrantExpires(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	s := &grant.Static{Lifetime: 20 * time.Minute, Now: func() time.Time { return now }}
	s.Template.Bucket, s.Template.AccessKeyID = "b", "k"
	g, err := s.Grant(context.Background(), jobID)
	if err != nil || g.Bucket != "b" || g.AccessKeyID != "k" || !g.Expiration.Equal(now.Add(20*time.Minute)) {
		t.Fatalf("static grant %+v %v", g, err)
	}
}

// A warm start's grant adds reading — only reading — the one checkpoint the run starts from;
// any other prefix is refused.
func TestSessionPolicyReadsAWarmStartsCheckpoint(t *testing.T) {
	t.Parallel()
	const src = "01a20201-0000-7000-8000-00000000000f"
	doc, err := grant.SessionPolicy("ht-data", "prod/", "", jobID, "jobs/"+src+"/checkpoints/step_40/")
	if err != nil {
		t.Fatal(err)
	}
	if len(doc) > 2048 {
		t.Errorf("session policy is %d characters", len(doc))
	}
	var p struct {
		Statement []struct {
			Sid      string
			Action   []string
			Resource []string
		}
	}
	if err := json.Unmarshal([]byte(doc), &p); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range p.Statement {
		if s.Sid != "ReadOnly" {
			continue
		}
		found = true
		if len(s.Action) != 1 || s.Action[0] != "s3:GetObject" {
			t.Errorf("the warm start's checkpoint allows %v", s.Action)
		}
		if len(s.Resource) != 1 || s.Resource[0] != "arn:aws:s3:::ht-data/prod/jobs/"+src+"/checkpoints/step_40/*" {
			t.Errorf("readable: %v", s.Resource)
		}
	}
	if !found {
		t.Fatalf("no read statement in %s", doc)
	}
	for _, bad := range []string{"jobs/" + src + "/", "jobs/" + src + "/logs/", "archive/", "jobs/" + src + "/checkpoints/step_40/../../", "jobs/*/checkpoints/step_1/"} {
		if _, err := grant.SessionPolicy("ht-data", "prod/", "", jobID, bad); err == nil {
			t.Errorf("a grant may read %q", bad)
		}
	}
}
