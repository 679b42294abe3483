package config

import (
	"fmt"
	"slices"
	"strings"
)

// A tokens file (receive.tokens_file) holds the Bearer tokens senders
// present, beside receive.tokens; the receive daemon reads it at start and
// again on SIGHUP and when it changes.

// MaxTokensFile bounds a tokens file: thousands of tokens, never a log
// file pointed at by mistake.
const MaxTokensFile = 64 << 10

// TokensFileError is a tokens file that cannot be used, located by line.
type TokensFileError struct {
	File   string
	Line   int // 0 for the file as a whole
	Reason string
}

func (e *TokensFileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("tokens file %s:%d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("tokens file %s: %s", e.File, e.Reason)
}

// ParseTokens reads the content of a tokens file: one token a line, blank
// lines and lines starting with # ignored, the spaces around a token (and a
// CR of a Windows line end) trimmed. A line with anything but one token on
// it is refused, so that a token is never taken only in part.
func ParseTokens(name string, b []byte) ([]string, error) {
	if len(b) > MaxTokensFile {
		return nil, &TokensFileError{File: name, Reason: fmt.Sprintf("larger than %d bytes; is it the right file?", MaxTokensFile)}
	}
	var out []string
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if reason := badToken(line); reason != "" {
			return nil, &TokensFileError{File: name, Line: i + 1, Reason: reason}
		}
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return out, nil
}
