package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// S3Config says which bucket a store uses and how to reach it.
type S3Config struct {
	Bucket string
	// Prefix is prepended to every key ("" for the bucket's root); it lets several
	// deployments share a bucket.
	Prefix string
	// Endpoint is an S3-compatible server ("http://127.0.0.1:7070"); empty for AWS. Such a
	// server is addressed path-style.
	Endpoint string
	Region   string
	// Static credentials; empty uses the SDK's default chain (environment, profile, role).
	AccessKeyID, SecretAccessKey, SessionToken string
	// Credentials, if set, is used instead of the static ones and the chain (an agent's
	// job-scoped credentials, which the service refreshes).
	Credentials aws.CredentialsProvider

	// PartSize is the multipart part size (DefaultPartSize); objects under it go in one PUT.
	PartSize int64
	// Concurrency is how many parts of one object are in flight at once (DefaultConcurrency).
	Concurrency int
}

// Multipart defaults: parts of 16 MiB, 8 in flight per object (about 144 MiB of buffers for
// one large upload).
const (
	DefaultPartSize    = 16 << 20
	DefaultConcurrency = 8
)

// ParseS3URL reads a store address of the form
//
//	s3://BUCKET[/PREFIX][?endpoint=http://host:port&region=REGION]
//
// Credentials come from the environment (AWS_ACCESS_KEY_ID, ...) or the SDK's chain.
func ParseS3URL(raw string) (S3Config, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return S3Config{}, fmt.Errorf("blob: %q is not s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION]", raw)
	}
	c := S3Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/"), Endpoint: u.Query().Get("endpoint"), Region: u.Query().Get("region")}
	if c.Prefix != "" {
		c.Prefix += "/"
	}
	if v := u.Query().Get("part_size_mib"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 5 {
			return S3Config{}, fmt.Errorf("blob: part_size_mib=%q: want a whole number of MiB, at least 5", v)
		}
		c.PartSize = int64(n) << 20
	}
	return c, nil
}

// S3 stores objects in an S3 bucket. Large objects go up as concurrent multipart uploads
// through the SDK's transfer manager.
type S3 struct {
	cfg     S3Config
	client  *s3.Client
	tm      *transfermanager.Client
	presign *s3.PresignClient
}

// NewS3 returns a store for cfg.Bucket. It does not check that the bucket exists.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("blob: S3Config.Bucket is required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(cfg.Region)}
	switch {
	case cfg.Credentials != nil:
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	case cfg.AccessKeyID != "":
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("blob: aws config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		// A multipart object's checksum is of its parts, which a whole-object read cannot
		// check; the manifest's sha256 is what checkpoints are verified against.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
			if strings.HasPrefix(cfg.Endpoint, "http://") {
				// Over plain HTTP the SDK would hash every body once more to sign it; the
				// CRC32 checksum each part carries already guards the bytes.
				o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
			}
		}
	})
	return &S3{
		cfg:    cfg,
		client: client,
		tm: transfermanager.New(client, func(o *transfermanager.Options) {
			o.PartSizeBytes = cfg.PartSize
			o.MultipartUploadThreshold = cfg.PartSize
			o.Concurrency = cfg.Concurrency
			// Abort a failed multipart upload even when the failure was a cancellation, so
			// no orphaned parts are left to bill.
			o.FailTimeout = 30 * time.Second
		}),
		presign: s3.NewPresignClient(client),
	}, nil
}

// Client is the underlying S3 client, for callers that need an operation the Store does not
// offer.
func (s *S3) Client() *s3.Client { return s.client }

// Bucket is the store's bucket.
func (s *S3) Bucket() string { return s.cfg.Bucket }

func (s *S3) key(k string) (*string, error) {
	if k == "" || strings.HasPrefix(k, "/") || strings.Contains(k, "//") {
		return nil, fmt.Errorf("blob: invalid key %q", k)
	}
	return aws.String(s.cfg.Prefix + k), nil
}

// Put uploads the object: in one request when it is small, else as a multipart upload whose
// parts go up concurrently. The object appears only once the upload completes.
func (s *S3) Put(ctx context.Context, key string, r io.Reader) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	in := &transfermanager.UploadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: k, Body: r}
	if kind := KindOf(key); kind != "" {
		// The bucket's lifecycle rules tell checkpoints from logs by this tag (infra/).
		in.Tagging = aws.String("hostedtrain-kind=" + kind)
	}
	if _, err := s.tm.UploadObject(ctx, in); err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	return nil
}

// PutAt uploads size bytes of r, read at their offsets: a multipart upload's parts go up
// several at once, each read straight from r (a file) as its request is sent, with no copy
// through memory — Put's reader can only be read in order, so the transfer manager copies it
// into part buffers first. An object under the part size goes in one PUT. Each part carries a
// CRC32 checksum; a failed upload is aborted so no parts are left to bill.
func (s *S3) PutAt(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	var tagging *string
	if kind := KindOf(key); kind != "" {
		tagging = aws.String("hostedtrain-kind=" + kind)
	}
	crc := types.ChecksumAlgorithmCrc32
	part := s.cfg.PartSize
	if size < part {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: k, Tagging: tagging,
			Body: io.NewSectionReader(r, 0, size), ContentLength: aws.Int64(size), ChecksumAlgorithm: crc})
		if err != nil {
			return fmt.Errorf("blob: put %s: %w", key, err)
		}
		return nil
	}
	if size/part >= maxParts {
		part = size/maxParts + 1
	}
	mpu, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: k,
		Tagging: tagging, ChecksumAlgorithm: crc})
	if err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	n := int((size + part - 1) / part)
	done := make([]types.CompletedPart, n)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sem := make(chan struct{}, s.cfg.Concurrency)
	var wg sync.WaitGroup
parts:
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-pctx.Done():
			break parts
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			off := int64(i) * part
			num, length := int32(i+1), min(part, size-off)
			out, err := s.client.UploadPart(pctx, &s3.UploadPartInput{Bucket: aws.String(s.cfg.Bucket), Key: k,
				UploadId: mpu.UploadId, PartNumber: &num, Body: io.NewSectionReader(r, off, length),
				ContentLength: aws.Int64(length), ChecksumAlgorithm: crc})
			if err != nil {
				cancel(fmt.Errorf("part %d: %w", num, err))
				return
			}
			done[i] = types.CompletedPart{PartNumber: &num, ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32}
		}()
	}
	wg.Wait()
	err = context.Cause(pctx)
	if err == nil {
		_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: k,
			UploadId: mpu.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: done}})
	}
	if err != nil {
		// Abort even when ctx ended, so no orphaned parts are left to bill.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer acancel()
		_, _ = s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.cfg.Bucket), Key: k, UploadId: mpu.UploadId})
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	return nil
}

// maxParts is S3's limit on a multipart upload's parts.
const maxParts = 10000

// AtPutter is a store that uploads from an io.ReaderAt (S3: see PutAt).
type AtPutter interface {
	PutAt(ctx context.Context, key string, r io.ReaderAt, size int64) error
}

// Get opens the object for reading.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	k, err := s.key(key)
	if err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: k})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("blob: get %s: %w", key, err)
	}
	return out.Body, nil
}

// List pages through the keys under prefix.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.cfg.Bucket), Prefix: aws.String(s.cfg.Prefix + prefix),
	})
	var out []Object
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("blob: list %s: %w", prefix, err)
		}
		for _, o := range page.Contents {
			out = append(out, Object{
				Key:      strings.TrimPrefix(aws.ToString(o.Key), s.cfg.Prefix),
				Size:     aws.ToInt64(o.Size),
				Modified: aws.ToTime(o.LastModified),
			})
		}
	}
	return out, nil
}

// Delete removes the object; deleting a missing key is not an error.
func (s *S3) Delete(ctx context.Context, key string) error {
	k, err := s.key(key)
	if err != nil {
		return err
	}
	if _, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: k}); err != nil && !isNotFound(err) {
		return fmt.Errorf("blob: delete %s: %w", key, err)
	}
	return nil
}

// PresignGet returns a URL that downloads the object without credentials until ttl passes.
func (s *S3) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	k, err := s.key(key)
	if err != nil {
		return "", err
	}
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: k},
		s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("blob: presign %s: %w", key, err)
	}
	return req.URL, nil
}

func isNotFound(err error) bool {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}
