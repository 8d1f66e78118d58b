package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// idScan bounds how many of the organization's newest jobs a short id is looked for among.
const idScan = 1000

// jobID resolves a job id as typed: a whole id as it is, or a piece of one — its start or its
// end, at least 4 characters — among the organization's newest jobs (the prime CLI's habit of
// short ids). Job ids are UUIDv7s, whose starts are times, so jobs made together share their
// start; their ends are random.
func jobID(ctx context.Context, api *client.Client, arg string) (string, error) {
	if len(arg) == 36 {
		return arg, nil
	}
	piece := strings.ToLower(arg)
	if len(piece) < 4 {
		return "", fmt.Errorf("%q is too short for a job id: give at least 4 characters of its start or its end", arg)
	}
	var matches []string
	cursor := ""
	for n := 0; n < idScan; n += 100 {
		jobs, next, err := api.ListJobs(ctx, job.ListFilter{}, cursor, 100)
		if err != nil {
			return "", err
		}
		for _, j := range jobs {
			if strings.HasPrefix(j.ID, piece) || strings.HasSuffix(j.ID, piece) {
				matches = append(matches, j.ID)
			}
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("no job of yours starts or ends with %q (among your %d newest); give the whole id", arg, idScan)
	case 1:
		return matches[0], nil
	}
	shown := matches[:min(len(matches), 5)]
	return "", fmt.Errorf("%q is a piece of %d jobs' ids (%s); give more of it", arg, len(matches), strings.Join(shown, ", "))
}
