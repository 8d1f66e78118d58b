package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/seal"
)

func newAdminCmd() *cobra.Command {
	c := &cobra.Command{Use: "admin", Short: "Operator commands"}
	c.AddCommand(newTokenCmd(), newOrgCmd(), newKeysCmd(), newRevokeCmd(), newNodesCmd())
	return c
}

// keysFile is where `hostedtrain dev` keeps its signing keys under --data.
const keysFile = "jwt-keys.json"

// loadKeys reads the signing keys: HOSTEDTRAIN_JWT_KEYS (kid=base64,...) as deployed, or
// DIR/jwt-keys.json of a local stack.
func loadKeys(dataDir string) (*auth.KeySet, error) {
	if v := os.Getenv("HOSTEDTRAIN_JWT_KEYS"); v != "" && dataDir == "" {
		return auth.ParseKeySet(v)
	}
	if dataDir == "" {
		return nil, errors.New("say where the keys are: --data DIR (a `hostedtrain dev` data folder) or HOSTEDTRAIN_JWT_KEYS")
	}
	return auth.LoadKeySetFile(filepath.Join(dataDir, keysFile))
}

func newTokenCmd() *cobra.Command {
	var dataDir, org, scopes, subject string
	var ttl time.Duration
	c := &cobra.Command{
		Use:   "token",
		Short: "Print a signed API token",
		Example: "  hostedtrain admin token --data .hostedtrain/dev --org acme --scopes jobs:read,jobs:write --ttl 24h\n" +
			"  scopes: " + strings.Join(auth.AllScopes, ", "),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := loadKeys(dataDir)
			if err != nil {
				return err
			}
			var list []string
			for s := range strings.SplitSeq(scopes, ",") {
				if s = strings.TrimSpace(s); s != "" {
					list = append(list, s)
				}
			}
			if len(list) == 0 {
				return errors.New("--scopes is empty; known scopes: " + strings.Join(auth.AllScopes, ", "))
			}
			tok, err := keys.Issue(auth.TokenRequest{Subject: subject, Org: org, Scopes: list, TTL: ttl}, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	c.Flags().StringVar(&dataDir, "data", "", "the data folder of a `hostedtrain dev` stack")
	c.Flags().StringVar(&org, "org", "", "the organization the token acts for (required)")
	c.Flags().StringVar(&scopes, "scopes", "jobs:read,jobs:write", "comma-separated scopes")
	c.Flags().StringVar(&subject, "subject", "", "who the token names (default: the organization; for agents, the agent id)")
	c.Flags().DurationVar(&ttl, "ttl", time.Hour, "lifetime")
	_ = c.MarkFlagRequired("org")
	return c
}

func newRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke TOKEN",
		Short: "Refuse a token from now until it expires (needs an admin token)",
		Args:  needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			jti, until, err := api.RevokeToken(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked until %s\n", jti, until.Format(time.RFC3339))
			return nil
		}),
	}
}

func newKeysCmd() *cobra.Command {
	var keep string
	c := &cobra.Command{
		Use:   "keys jwt|seal",
		Short: "Print a key ring with a new first key, for HOSTEDTRAIN_JWT_KEYS or HOSTEDTRAIN_SECRETS_KEYS",
		Long: "Prints kid=base64key[,...]: a new 256-bit key, which signs tokens (jwt) or seals job secrets (seal),\n" +
			"followed by the keys of --keep, which go on verifying or opening what they signed or sealed.\n" +
			"docs/operations.md shows how to rotate with it.",
		Example: "  hostedtrain admin keys jwt\n" +
			"  hostedtrain admin keys seal --keep \"$(aws secretsmanager get-secret-value --secret-id hostedtrain/prod/secrets-keys --query SecretString --output text)\"",
		Args:      needArgs(1),
		ValidArgs: []string{"jwt", "seal"},
		RunE: func(cmd *cobra.Command, args []string) error {
			ring, err := newKeyRing(args[0], keep, time.Now())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), ring)
			return nil
		},
	}
	c.Flags().StringVar(&keep, "keep", "", "the current ring, whose keys are kept after the new one (drop a key by leaving it out)")
	return c
}

// newKeyRing is a ring of kind jwt or seal: a new key named after now, then keep's keys.
func newKeyRing(kind, keep string, now time.Time) (string, error) {
	kid := "k" + now.UTC().Format("20060102T150405")
	var fresh string
	var err error
	switch kind {
	case "jwt":
		if keep != "" {
			if _, err := auth.ParseKeySet(keep); err != nil {
				return "", fmt.Errorf("--keep: %w", err)
			}
		}
		var ks *auth.KeySet
		if ks, err = auth.NewKeySet(); err == nil {
			fresh = ks.String()
		}
	case "seal":
		if keep != "" {
			if _, err := seal.Parse(keep); err != nil {
				return "", fmt.Errorf("--keep: %w", err)
			}
		}
		fresh, err = seal.NewKey(kid)
	default:
		return "", fmt.Errorf("keys: want jwt or seal, got %q", kind)
	}
	if err != nil {
		return "", err
	}
	if keep == "" {
		return fresh, nil
	}
	if newKid, _, _ := strings.Cut(fresh, "="); strings.Contains(","+keep, ","+newKid+"=") {
		return "", fmt.Errorf("--keep already has a key named %s: try again in a second", newKid)
	}
	return fresh + "," + keep, nil
}

func newOrgCmd() *cobra.Command {
	c := &cobra.Command{Use: "org", Short: "An organization's share of the queue (needs an admin token)"}
	show := func(cmd *cobra.Command, st *job.OrgStatus) {
		limit := func(n int) string {
			if n == 0 {
				return "none"
			}
			return fmt.Sprint(n)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "org %s: weight %g, running limit %s, queued limit %s\n  now: %d queued, %d running on %d GPUs; %.2f GPU-hours used (decayed)\n",
			st.Org, st.Weight, limit(st.MaxRunning), limit(st.MaxQueued), st.Queued, st.Running, st.RunningGPUs, st.UsageGPUHours)
		if st.MonthlyGPUHours > 0 {
			held := ""
			if st.BudgetHeld {
				held = "; spent: its jobs are held until it is raised or the month ends"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "  monthly budget: %.2f of %.2f GPU-hours used this month (%.0f %%)%s\n",
				st.MonthGPUHours, st.MonthlyGPUHours, 100*st.MonthGPUHours/st.MonthlyGPUHours, held)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "  monthly budget: none (%.2f GPU-hours used this month)\n", st.MonthGPUHours)
		}
		if st.CheckpointTTLDays > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "  checkpoints: kept %d days after a job ends (pinned ones always)\n", st.CheckpointTTLDays)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "  storage: %s (as last measured)\n", size(st.StorageBytes))
	}
	get := &cobra.Command{
		Use: "get ORG", Short: "Show an organization's settings and use", Args: needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			st, err := api.GetOrg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			show(cmd, st)
			return nil
		}),
	}
	var s job.OrgSettings
	set := &cobra.Command{
		Use: "set ORG", Short: "Set an organization's weight, limits and monthly budget (flags not given keep their values; 0 restores a default)",
		Example: "  hostedtrain admin org set acme --monthly-gpu-hours 2000\n  hostedtrain admin org set acme --weight 2 --max-running 8",
		Args:    needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			cur, err := api.GetOrg(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			keep := job.OrgSettings{Weight: cur.Weight, MaxRunning: cur.MaxRunning, MaxQueued: cur.MaxQueued, MonthlyGPUHours: cur.MonthlyGPUHours,
				CheckpointTTLDays: cur.CheckpointTTLDays}
			f := cmd.Flags()
			if !f.Changed("weight") {
				s.Weight = keep.Weight
			}
			if !f.Changed("max-running") {
				s.MaxRunning = keep.MaxRunning
			}
			if !f.Changed("max-queued") {
				s.MaxQueued = keep.MaxQueued
			}
			if !f.Changed("monthly-gpu-hours") {
				s.MonthlyGPUHours = keep.MonthlyGPUHours
			}
			if !f.Changed("checkpoint-ttl-days") {
				s.CheckpointTTLDays = keep.CheckpointTTLDays
			}
			st, err := api.SetOrg(cmd.Context(), args[0], s)
			if err != nil {
				return err
			}
			show(cmd, st)
			return nil
		}),
	}
	set.Flags().Float64Var(&s.Weight, "weight", 0, "share of the GPUs relative to other organizations (default 1)")
	set.Flags().IntVar(&s.MaxRunning, "max-running", 0, "jobs that may run at once")
	set.Flags().IntVar(&s.MaxQueued, "max-queued", 0, "jobs that may wait at once")
	set.Flags().Float64Var(&s.MonthlyGPUHours, "monthly-gpu-hours", 0, "the organization's monthly budget of GPU time (0: none)")
	set.Flags().IntVar(&s.CheckpointTTLDays, "checkpoint-ttl-days", 0, "delete a job's checkpoints this long after it ends, pinned ones kept (0: none)")
	c.AddCommand(get, set)
	return c
}

// newNodesCmd is `admin nodes`: the nodes' health, and taking one out of rotation or back.
func newNodesCmd() *cobra.Command {
	c := &cobra.Command{Use: "nodes", Short: "The GPU nodes' health and caches: list, cordon, drain, uncordon, warm (needs an admin token)"}
	c.AddCommand(&cobra.Command{
		Use: "warm NODE MODEL...", Short: "Fetch models' weights into a node's cache ahead of demand (its agent fetches them within seconds)",
		Args: cobra.MinimumNArgs(2),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			if err := api.WarmNode(cmd.Context(), args[0], args[1:]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s asked to warm %s; `admin nodes list` shows its cache\n", args[0], strings.Join(args[1:], ", "))
			return nil
		}),
	})
	c.AddCommand(&cobra.Command{
		Use: "list", Short: "Nodes seen lately and nodes out of rotation", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			api, err := apiClient()
			if err != nil {
				return err
			}
			nodes, err := api.Nodes(cmd.Context())
			if err != nil {
				return err
			}
			renderNodes(cmd.OutOrStdout(), nodes, time.Now())
			return nil
		},
	})
	set := func(use, short, state, done string) *cobra.Command {
		var reason string
		sc := &cobra.Command{
			Use: use + " NODE", Short: short, Args: needArgs(1),
			RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
				n, err := api.SetNode(cmd.Context(), args[0], state, reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "node %s %s (now %s)\n", n.ID, done, n.State)
				return nil
			}),
		}
		if state != job.NodeOK {
			sc.Flags().StringVar(&reason, "reason", "", "why, for whoever looks next")
		}
		return sc
	}
	c.AddCommand(
		set("cordon", "Take a node out of rotation: no new jobs; its running jobs go on", job.NodeCordoned, "cordoned: it takes no new jobs"),
		set("drain", "Take a node out of rotation and hand its jobs back to resume elsewhere", job.NodeDraining,
			"draining: its jobs go back to the queue at their next heartbeat"),
		set("uncordon", "Put a node (cordoned, draining or quarantined) back in rotation, its faults forgotten", job.NodeOK, "back in rotation"),
	)
	return c
}
