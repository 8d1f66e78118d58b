// Package grant hands an agent object-storage access limited to one job's data: temporary
// credentials from STS AssumeRole, narrowed by a session policy to the job's prefix. Why
// credentials rather than presigned URLs is in docs/design.md ("Storage access for agents").
package grant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// validID is a job id that can go in a policy and a role session name (64 characters at most).
var validID = regexp.MustCompile(`^[A-Za-z0-9-]{1,60}$`)

// Granter hands out storage access for one job: its own prefix, and read-only the other
// prefixes named in reads (a warm start's checkpoint, jobs/{id}/checkpoints/step_{n}/).
type Granter interface {
	Grant(ctx context.Context, jobID string, reads ...string) (*job.StorageGrant, error)
}

// validRead is a prefix a grant may add for reading: one committed checkpoint of a job.
var validRead = regexp.MustCompile(`^jobs/[A-Za-z0-9-]{1,60}/checkpoints/step_[0-9]{1,9}/$`)

// AssumeRoler is the one STS call a granter makes (*sts.Client in production).
type AssumeRoler interface {
	AssumeRole(ctx context.Context, in *sts.AssumeRoleInput, opts ...func(*sts.Options)) (*sts.AssumeRoleOutput, error)
}

// STS grants temporary credentials of RoleARN, narrowed to the job's prefix.
type STS struct {
	Client  AssumeRoler
	RoleARN string
	// Bucket, Prefix and Region locate the store (Prefix is its root, "" or ending in "/").
	Bucket, Prefix, Region string
	// KMSKeyARN is the bucket's SSE-KMS key, which reads and writes need; "" for none.
	KMSKeyARN string
	// Duration is how long the credentials last: 15 minutes to 1 hour (AWS caps credentials
	// of a role assumed by another role's session, as a Lambda function's is, at 1 hour).
	Duration time.Duration
}

// DefaultDuration is how long granted credentials last unless STS.Duration says otherwise.
const DefaultDuration = time.Hour

// Grant assumes the role for the job.
func (g *STS) Grant(ctx context.Context, jobID string, reads ...string) (*job.StorageGrant, error) {
	if g.Client == nil || g.RoleARN == "" || g.Bucket == "" {
		return nil, errors.New("grant: STS needs Client, RoleARN and Bucket")
	}
	d := g.Duration
	if d == 0 {
		d = DefaultDuration
	}
	doc, err := SessionPolicy(g.Bucket, g.Prefix, g.KMSKeyARN, jobID, reads...)
	if err != nil {
		return nil, err
	}
	out, err := g.Client.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn: aws.String(g.RoleARN),
		// The session name shows in CloudTrail next to every request the agent makes.
		RoleSessionName: aws.String("job-" + jobID),
		Policy:          aws.String(doc),
		DurationSeconds: aws.Int32(int32(d / time.Second)),
	})
	if err != nil {
		return nil, fmt.Errorf("grant: assume role: %w", err)
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil || c.Expiration == nil {
		return nil, errors.New("grant: assume role returned no credentials")
	}
	return &job.StorageGrant{
		Bucket: g.Bucket, Prefix: g.Prefix, Region: g.Region,
		AccessKeyID: *c.AccessKeyId, SecretAccessKey: *c.SecretAccessKey,
		SessionToken: aws.ToString(c.SessionToken), Expiration: *c.Expiration,
	}, nil
}

// SessionPolicy is the IAM policy that narrows the role to one job's data: read, write and
// delete objects (and tag them, and finish or abort multipart uploads) under the job's prefix,
// list only that prefix, and use the bucket's KMS key through S3 alone.
func SessionPolicy(bucket, prefix, kmsKeyARN, jobID string, reads ...string) (string, error) {
	if !validID.MatchString(jobID) {
		return "", fmt.Errorf("grant: invalid job id %q", jobID)
	}
	jobPrefix := prefix + blob.JobPrefix(jobID)
	statements := []statement{
		{
			Sid:    "JobObjects",
			Effect: "Allow",
			Action: []string{
				"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:PutObjectTagging",
				"s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
			},
			Resource: []string{"arn:aws:s3:::" + bucket + "/" + jobPrefix + "*"},
		},
		{
			Sid:       "JobListing",
			Effect:    "Allow",
			Action:    []string{"s3:ListBucket"},
			Resource:  []string{"arn:aws:s3:::" + bucket},
			Condition: map[string]map[string]any{"StringLike": {"s3:prefix": []string{jobPrefix, jobPrefix + "*"}}},
		},
	}
	if len(reads) > 0 {
		read := statement{Sid: "ReadOnly", Effect: "Allow", Action: []string{"s3:GetObject"}}
		for _, rp := range reads {
			if !validRead.MatchString(rp) {
				return "", fmt.Errorf("grant: %q is not a checkpoint prefix a job may read", rp)
			}
			read.Resource = append(read.Resource, "arn:aws:s3:::"+bucket+"/"+prefix+rp+"*")
		}
		statements = append(statements, read)
	}
	if kmsKeyARN != "" {
		statements = append(statements, statement{
			Sid:       "BucketKey",
			Effect:    "Allow",
			Action:    []string{"kms:GenerateDataKey", "kms:Decrypt"},
			Resource:  []string{kmsKeyARN},
			Condition: map[string]map[string]any{"StringEquals": {"kms:ViaService": "s3.amazonaws.com"}},
		})
	}
	b, err := json.Marshal(policy{Version: "2012-10-17", Statement: statements})
	if err != nil {
		return "", err
	}
	return string(b), nil
}

type policy struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

type statement struct {
	Sid       string                    `json:"Sid"`
	Effect    string                    `json:"Effect"`
	Action    []string                  `json:"Action"`
	Resource  []string                  `json:"Resource"`
	Condition map[string]map[string]any `json:"Condition,omitempty"`
}

// Static hands every job the same long-lived credentials: for `hostedtrain dev` and tests with
// an S3-compatible server that has no STS. It narrows nothing.
type Static struct {
	Template job.StorageGrant
	// Template is what every grant holds, but for its Expiration.
	// Lifetime is the Expiration each grant claims (default 1 hour), so agents refresh as
	// they would from STS.
	Lifetime time.Duration
	Now      func() time.Time
}

// Grant returns the static credentials.
func (s *Static) Grant(_ context.Context, _ string, _ ...string) (*job.StorageGrant, error) {
	now, life := time.Now, s.Lifetime
	if s.Now != nil {
		now = s.Now
	}
	if life == 0 {
		life = DefaultDuration
	}
	g := s.Template
	g.Expiration = now().Add(life).UTC()
	return &g, nil
}
