package webhooks

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// The retry schedule is written once: the default the service takes, the local stack's flag
// (FormatSchedule of it) and the deployment's SSM parameter (infra/hostedtrain.yml) agree.
func TestTheRetrySchedulesAgree(t *testing.T) {
	t.Parallel()
	formatted := FormatSchedule(DefaultSchedule)
	back, err := ParseSchedule(formatted)
	if err != nil || !slices.Equal(back, DefaultSchedule) {
		t.Fatalf("FormatSchedule gives %q, which reads back as %v (%v)", formatted, back, err)
	}
	infra, err := os.ReadFile("../infra/hostedtrain.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)webhook-schedule\n.*?Value: (\S+)`).FindSubmatch(infra)
	if m == nil || string(m[1]) != formatted {
		t.Errorf("infra/hostedtrain.yml's webhook-schedule is %q; the service's default is %q", m, formatted)
	}
}
