package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// cliConfig is ~/.config/hostedtrain/config.json: where the API is and the token to use.
// HOSTEDTRAIN_URL and HOSTEDTRAIN_TOKEN win over it.
type cliConfig struct {
	URL   string `json:"url,omitempty"`
	Token string `json:"token,omitempty"`
}

func configPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config folder: %w (set HOSTEDTRAIN_TOKEN instead)", err)
	}
	return filepath.Join(dir, "hostedtrain", "config.json"), nil
}

func loadConfig() (cliConfig, error) {
	var c cliConfig
	p, err := configPath()
	if err != nil {
		return c, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", p, err)
	}
	return c, nil
}

// saveConfig writes the config readable by its owner only: it holds a token.
func saveConfig(c cliConfig) (string, error) {
	p, err := configPath()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", err
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o600); err != nil { // WriteFile keeps an existing file's mode
		return "", err
	}
	return p, os.Rename(tmp, p)
}

func newLoginCmd() *cobra.Command {
	var url, token string
	c := &cobra.Command{
		Use:   "login",
		Short: "Keep your API token (and the API's address) in ~/.config/hostedtrain/config.json",
		Long: `login checks the token against the API and keeps it, with the URL, in
~/.config/hostedtrain/config.json (mode 0600). Give the token with --token, or paste it when
asked (it is not echoed), or pipe it in. HOSTEDTRAIN_TOKEN and HOSTEDTRAIN_URL win over the
file when they are set.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if url == "" {
				url = firstNonEmpty(os.Getenv("HOSTEDTRAIN_URL"), cfg.URL, defaultURL)
			}
			if url, err = apiURL(url); err != nil {
				return err
			}
			if token == "" && os.Getenv("HOSTEDTRAIN_TOKEN") != "" {
				token = os.Getenv("HOSTEDTRAIN_TOKEN")
				fmt.Fprintln(cmd.ErrOrStderr(), "using the token in HOSTEDTRAIN_TOKEN")
			}
			if token == "" {
				if token, err = readToken(cmd); err != nil {
					return err
				}
			}
			token = strings.TrimSpace(token)
			if token == "" {
				return errors.New("no token given: pass --token, paste it when asked, or pipe it in")
			}
			// A token is good if the API takes it; one without jobs:read still authenticates
			// (403 rather than 401).
			_, _, err = client.New(url, token).ListJobs(cmd.Context(), job.ListFilter{}, "", 1)
			var apiErr *client.Error
			if err != nil && !(errors.As(err, &apiErr) && apiErr.Status == 403) {
				return fmt.Errorf("the API at %s does not take this token: %w", url, err)
			}
			p, err := saveConfig(cliConfig{URL: url, Token: token})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "logged in to %s; the token is kept in %s\n", url, p)
			if t := os.Getenv("HOSTEDTRAIN_TOKEN"); t != "" && t != token {
				fmt.Fprintln(cmd.ErrOrStderr(), "note: HOSTEDTRAIN_TOKEN is set and wins over the saved token")
			}
			return nil
		},
	}
	c.Flags().StringVar(&url, "url", "", "the API (default HOSTEDTRAIN_URL, the saved one, or "+defaultURL+")")
	c.Flags().StringVar(&token, "token", "", "the token (default: asked for)")
	return c
}

func newLogoutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "logout",
		Short: "Forget the saved token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			cfg.Token = ""
			p, err := saveConfig(cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "the token is removed from %s\n", p)
			return nil
		},
	}
}

func readToken(cmd *cobra.Command) (string, error) {
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(cmd.ErrOrStderr(), "token: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(cmd.ErrOrStderr())
		return string(b), err
	}
	line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if err != nil && line == "" {
		return "", errors.New("no token: pass --token, export HOSTEDTRAIN_TOKEN, or pipe it in (hostedtrain login < token.txt)")
	}
	return line, nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
