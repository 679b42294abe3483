// Package redact masks what may be a secret in a URL before the URL is
// shown: in an error, a log line, a stored reason, a route's name. A
// query string may carry a gateway's key (?api_key=...), a database URL
// its password (postgres://user:password@host), a NATS URL its token
// (nats://token@host), a fragment an access token; none of them is ever
// printed by mensageria, nor stored in the outbox, route_state or the
// dead rows.
//
// URL masks one URL; Text masks every URL it finds in a text (an error
// of net/http quotes the whole URL of its request); Error and Handler
// apply Text to errors and to log records. SecretsOf keeps what one URL
// carries, to mask it where it turns up without its URL around it (a
// receiver's error page that echoes the query string it was sent).
//
// What is masked: the password of the user-info (user:xxxxx@), a
// user-info without a password as a whole (xxxxx@: a name alone may be
// a token), the query string (?…), the fragment (#…), and in a text the
// value of a "password=" setting (a libpq key/value string). A secret in
// a URL's path or host is not: put it in a header or a token setting.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces a user-info password, or a user-info that has none.
const Mask = "xxxxx"

const (
	queryMask    = "?…"
	fragmentMask = "#…"
)

// URL returns u with its user-info, query string and fragment masked; the
// scheme, host and path stay. A string that does not parse as a URL, or
// whose parse leaves an '@' after its host, is masked by its shape:
// everything up to its last '@' is taken for the user-info, everything
// from its first '?' or '#' for the query or fragment. A URL broken by an
// unescaped character in its password (postgres://u:pa/ss@host) then
// shows less, never the password; the one exception is a password that
// starts with digits and an unescaped '?' or '#' (http://u:12?34@host
// reads as host u, port 12 and a query, and shows "u:12"). A URL must
// escape such characters anyway (net/url refuses most of them).
func URL(u string) string {
	if p, err := url.Parse(u); err == nil && trustParse(u, p) {
		return parsed(u, p)
	}
	return byShape(u)
}

// trustParse: the parse took the last '@' before u's query and fragment
// (an '@' there is masked with them) for the end of its user-info. When
// it did not (no user-info, or an '@' after its host), the '@' may end a
// password the parse read as a host and port: http://u:12/34@host
// parses as host u, port 12, path /34@host.
func trustParse(u string, p *url.URL) bool {
	q := strings.IndexAny(u, "?#")
	if q < 0 {
		q = len(u)
	}
	at := strings.LastIndexByte(u[:q], '@')
	if at < 0 {
		return true
	}
	return p.User != nil && strings.HasPrefix(u[at+1:], p.Host)
}

// parsed masks u, which net/url parsed as trustParse wants, on its text:
// what is shown stays as written (the parse would lower-case the scheme
// and re-escape the path).
func parsed(u string, p *url.URL) string {
	q := strings.IndexAny(u, "?#")
	if q < 0 {
		q = len(u)
	}
	head := u[:q]
	if p.User != nil {
		// trustParse: the user-info runs from the authority's "//"
		// to the last '@' before the query.
		i := strings.Index(head, "//") + 2
		at := strings.LastIndexByte(head, '@')
		if i < 2 || at < i {
			return byShape(u)
		}
		head = head[:i] + userinfo(head[i:at]) + head[at+1:]
	}
	return head + queryAndFragment(u[q:])
}

// userinfo masks a user-info (without its '@'): the name stays when a
// password follows it.
func userinfo(ui string) string {
	if name, _, ok := strings.Cut(ui, ":"); ok {
		return name + ":" + Mask + "@"
	}
	return Mask + "@"
}

// byShape masks u by its characters alone, for a u that net/url cannot
// parse or whose parse trustParse doubts.
func byShape(u string) string {
	var b strings.Builder
	rest := u
	if i := strings.Index(rest, "://"); i >= 0 && scheme(rest[:i]) {
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
	} else if strings.HasPrefix(rest, "//") {
		b.WriteString("//")
		rest = rest[2:]
	} else {
		if at := strings.LastIndexByte(u, '@'); at >= 0 {
			// No authority, but an '@' (an opaque user@host, a URL
			// with a mangled scheme): what comes before it may be a
			// credential.
			if q := strings.IndexAny(u, "?#"); q >= 0 && q < at {
				return Mask + "@…"
			}
			return Mask + "@" + queryAndFragment(u[at+1:])
		}
		return queryAndFragment(u)
	}
	at := strings.LastIndexByte(rest, '@')
	if q := strings.IndexAny(rest, "?#"); q >= 0 && q < at {
		// A '?' or '#' before the '@': in a password, or an '@' in
		// the query? Either way nothing here is sure to be public.
		b.WriteString(Mask + "@…")
		return b.String()
	}
	if at >= 0 {
		b.WriteString(userinfo(rest[:at]))
		rest = rest[at+1:]
	}
	b.WriteString(queryAndFragment(rest))
	return b.String()
}

// queryAndFragment keeps what precedes the first '?' or '#' of s, and
// says whether a query, a fragment or both followed.
func queryAndFragment(s string) string {
	i := strings.IndexAny(s, "?#")
	if i < 0 {
		return s
	}
	if s[i] == '#' {
		return s[:i] + fragmentMask
	}
	if strings.IndexByte(s[i:], '#') >= 0 {
		return s[:i] + queryMask + fragmentMask
	}
	return s[:i] + queryMask
}

// scheme reports whether s is a URL scheme (RFC 3986: a letter, then
// letters, digits, '+', '-', '.').
func scheme(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// A URL in a text runs to the first space, quote, angle bracket or
// backtick; a backslash escapes the character after it, as Go's %q
// quotes a URL (net/http's errors: Post "http://...": ...).
const urlChar = `(?:[^\s"'<>\x60\\]|\\.)`

var (
	// quoted: a URL in double quotes runs to the closing one, spaces
	// included.
	quoted   = regexp.MustCompile(`"((?:[A-Za-z][A-Za-z0-9+.-]*:)?//(?:[^"\\\n]|\\.)*)"`)
	absolute = regexp.MustCompile(`(?:[A-Za-z][A-Za-z0-9+.-]*:)?//` + urlChar + `*`)
	// relative: a path with a query or fragment, at the start of the text
	// or after a space or punctuation (a redirect's Location, a
	// gateway's "Cannot POST /m2m?api_key=...").
	relative = regexp.MustCompile(`(^|[\s"'(\[=:,])(/` + `(?:[^\s"'<>\x60\\?#]|\\.)*` + `[?#]` + urlChar + `+)`)
	// password: the value of a password setting in a key/value string
	// (host=db password=... in libpq's form).
	password = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)((?:'[^']*'?|"[^"]*"?|[^\s'"&;,])[^\s&;,]*)`)
)

// Text returns s with every URL in it masked as URL does, and the value
// of each password= setting.
func Text(s string) string {
	if !strings.Contains(s, "//") && !strings.ContainsAny(s, "?#") && !containsFold(s, "password") {
		return s
	}
	s = quoted.ReplaceAllStringFunc(s, func(m string) string {
		return `"` + URL(m[1:len(m)-1]) + `"`
	})
	s = absolute.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasSuffix(m, "//") {
			return m // a "//" alone, no URL
		}
		m, tail := trimPunctuation(m)
		return URL(m) + tail
	})
	s = relative.ReplaceAllStringFunc(s, func(m string) string {
		sub := relative.FindStringSubmatch(m)
		u, tail := trimPunctuation(sub[2])
		return sub[1] + URL(u) + tail
	})
	return password.ReplaceAllString(s, "${1}"+Mask)
}

// trimPunctuation splits off what ends a sentence rather than a URL:
// "(Location: /m2m?k=v)." keeps its ")." after the masked URL.
func trimPunctuation(m string) (string, string) {
	t := strings.TrimRight(m, ".,:;!)]")
	return t, m[len(t):]
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}

// Error returns err with its text masked by Text: nil for nil, err itself
// when there is nothing to mask, else an error whose Error is the masked
// text and which unwraps to err (errors.Is and errors.As see what they
// saw). Every *url.Error in err's chain has its URL field masked first,
// so that one found by errors.As and printed on its own shows no secret
// either.
func Error(err error) error {
	if err == nil {
		return nil
	}
	maskURLErrors(err)
	text := err.Error()
	masked := Text(text)
	if masked == text {
		return err
	}
	return &maskedError{err: err, text: masked}
}

type maskedError struct {
	err  error
	text string
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }

func maskURLErrors(err error) {
	for err != nil {
		if ue, ok := err.(*url.Error); ok && ue != nil {
			if m := URL(ue.URL); m != ue.URL {
				ue.URL = m
			}
		}
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				maskURLErrors(e)
			}
			return
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		default:
			return
		}
	}
}

// Secrets is what one URL carries that URL hides: its user-info's name
// and password, its query string and each of its keys and values, its
// fragment. Secrets shorter than MinSecret are not masked on their own
// (masking every "1" of a text hides more than it protects); they are
// still masked inside the URL.
type Secrets struct {
	r *strings.Replacer
}

// MinSecret is the length from which a part of a URL is masked wherever
// it appears (Secrets).
const MinSecret = 6

// SecretsOf collects the secrets of rawURL; it never fails (a URL that
// does not parse gives what its shape shows). A nil *Secrets masks as
// Text does.
func SecretsOf(rawURL string) *Secrets {
	var parts []string
	add := func(s string) {
		if len(s) >= MinSecret {
			parts = append(parts, s)
			if u, err := url.QueryUnescape(s); err == nil && u != s && len(u) >= MinSecret {
				parts = append(parts, u)
			}
		}
	}
	// What a receiver may echo is the query string and its values; the
	// user-info, which travels in a header when at all, is taken too.
	addQuery := func(q string) {
		add(q)
		for _, kv := range strings.FieldsFunc(q, func(r rune) bool { return strings.ContainsRune("&;?#", r) }) {
			_, v, ok := strings.Cut(kv, "=")
			if !ok {
				add(kv) // ?s3cr3t: a key alone may be the secret
				continue
			}
			add(v)
			for _, part := range strings.Split(v, "=") {
				add(part)
			}
		}
	}
	if p, err := url.Parse(rawURL); err == nil && p.User != nil {
		if pw, ok := p.User.Password(); ok {
			add(pw)
		} else {
			add(p.User.Username())
		}
	}
	rest := rawURL
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		addQuery(rest[i+1:])
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		ui := rest[:at]
		add(ui)
		if _, pw, ok := strings.Cut(ui, ":"); ok {
			add(pw)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	// Longest first, so that a query string is masked whole before one
	// of its values.
	sortByLengthDesc(parts)
	pairs := make([]string, 0, 2*len(parts))
	for _, p := range parts {
		pairs = append(pairs, p, Mask)
	}
	return &Secrets{r: strings.NewReplacer(pairs...)}
}

func sortByLengthDesc(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && len(s[j]) > len(s[j-1]); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Text masks t as Text does, then every secret of the URL left in it.
func (s *Secrets) Text(t string) string {
	t = Text(t)
	if s == nil {
		return t
	}
	return s.r.Replace(t)
}

// Error is Error, with the secrets of the URL masked too.
func (s *Secrets) Error(err error) error {
	if err == nil {
		return nil
	}
	maskURLErrors(err)
	text := err.Error()
	masked := s.Text(text)
	if masked == text {
		return err
	}
	if me, ok := err.(*maskedError); ok {
		err = me.err
	}
	return &maskedError{err: err, text: masked}
}
