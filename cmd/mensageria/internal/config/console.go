package config

import (
	"net"
	"strings"
)

// ConsoleConfig is the console: block, read by 'mensageria console'.
type ConsoleConfig struct {
	Listen string // host:port; "" takes the command's default
	// Token, or User and Password, is what an operator logs in with; at
	// least one, each ${ENV} expanded.
	Token    Secret
	User     string
	Password Secret
	ReadOnly bool
	// AllApps lets the console retry and discard every app's dead
	// letters; without it, only the config's app's (as 'dead' without
	// --all-apps). It shows every app either way.
	AllApps bool
	// SecureCookie marks the session cookie Secure, for a console behind
	// a TLS-terminating proxy.
	SecureCookie bool
}

type rawConsole struct {
	Listen       string `yaml:"listen"`
	Token        string `yaml:"token"`
	User         string `yaml:"user"`
	Password     string `yaml:"password"`
	ReadOnly     string `yaml:"read_only"`
	AllApps      string `yaml:"all_apps"`
	SecureCookie string `yaml:"secure_cookie"`
}

func (p *parser) console(rc *rawConsole) (*ConsoleConfig, error) {
	out := &ConsoleConfig{}
	var err error
	str := func(dst *string, v string, path ...any) {
		if err == nil {
			*dst, err = p.expand(v, path...)
		}
	}
	var token, password string
	str(&out.Listen, rc.Listen, "console", "listen")
	str(&token, rc.Token, "console", "token")
	str(&out.User, rc.User, "console", "user")
	str(&password, rc.Password, "console", "password")
	if err == nil {
		out.ReadOnly, err = p.bool(rc.ReadOnly, "console", "read_only")
	}
	if err == nil {
		out.AllApps, err = p.bool(rc.AllApps, "console", "all_apps")
	}
	if err == nil {
		out.SecureCookie, err = p.bool(rc.SecureCookie, "console", "secure_cookie")
	}
	if err != nil {
		return nil, err
	}
	out.Token, out.Password = Secret(token), Secret(password)
	switch {
	case out.Listen != "":
		if _, _, serr := net.SplitHostPort(out.Listen); serr != nil {
			return nil, p.errAt([]any{"console", "listen"}, "%q is not host:port (e.g. 127.0.0.1:9470)", out.Listen)
		}
	}
	switch {
	case token == "" && out.User == "" && password == "":
		return nil, p.errAt([]any{"console"}, "needs token: (or user: and password:), e.g. token: ${MENSAGERIA_CONSOLE_TOKEN}: the console shows nothing to anonymous clients")
	case (out.User == "") != (password == ""):
		return nil, p.errAt([]any{"console", "user"}, "basic auth needs both user: and password:")
	case strings.Contains(out.User, ":"):
		return nil, p.errAt([]any{"console", "user"}, "a basic auth user cannot contain ':'")
	case token != "" && len(token) < 16:
		return nil, p.errAt([]any{"console", "token"}, "at least 16 characters (e.g. openssl rand -hex 24)")
	case password != "" && len(password) < 12:
		return nil, p.errAt([]any{"console", "password"}, "at least 12 characters")
	}
	return out, nil
}
