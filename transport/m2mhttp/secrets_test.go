package m2mhttp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

// TestSenderErrorsShowNoSecretOfTheURL: a key in the route URL's query
// string is in no error a Sender, a BatchSender or a Probe returns,
// whatever failed: a refused connection, a timeout, a 5xx whose page
// echoes the request, a redirect whose Location repeats the key, a TLS
// handshake refused, a waiting slot, a malformed batch answer; nor in a
// config error. The errors keep their kinds (Unavailable, Permanent).
func TestSenderErrorsShowNoSecretOfTheURL(t *testing.T) {
	const secret = "k3y-0f-th3-gw"
	query := "?api_key=" + secret + "&region=eu"
	slowArrived, release := make(chan struct{}, 8), make(chan struct{})
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/redirect"):
			w.Header().Set("Location", "/elsewhere?api_key="+secret)
			w.WriteHeader(http.StatusTemporaryRedirect)
		case strings.HasPrefix(r.URL.Path, "/slow"):
			slowArrived <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case strings.HasPrefix(r.URL.Path, "/batch-garbage"):
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>" + r.URL.String() + "</html>"))
		default:
			// A gateway's error page that quotes the request, in the
			// three ways one would.
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = w.Write([]byte("upstream failed for " + r.URL.String() + " key=" + r.URL.Query().Get("api_key") + " full http://" + r.Host + r.URL.String()))
		}
	}))
	defer echo.Close()
	defer close(release)
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler()) // its CA is not trusted
	defer tlsSrv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	_ = ln.Close()

	check := func(what string, err error, kind func(error) bool) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the key: %v", what, err)
		}
		var ue *url.Error
		if errors.As(err, &ue) && strings.Contains(ue.Error(), secret) {
			t.Errorf("%s: the url.Error behind it shows the key: %v", what, ue)
		}
		if kind != nil && !kind(err) {
			t.Errorf("%s: lost its kind: %v", what, err)
		}
	}
	send := func(u string, cfg SenderConfig) error {
		return newTestSender(t, u, cfg).Send(context.Background(), testDelivery())
	}
	check("refused", send("http://"+closed+"/m2m"+query, SenderConfig{}), mensageria.IsUnavailable)
	check("timeout", send(echo.URL+"/slow"+query, SenderConfig{Timeout: 50 * time.Millisecond}), mensageria.IsUnavailable)
	<-slowArrived
	check("502 echoing the request", send(echo.URL+"/m2m"+query, SenderConfig{}), mensageria.IsUnavailable)
	check("redirect", send(echo.URL+"/redirect"+query, SenderConfig{}), mensageria.IsPermanent)
	check("TLS refused", send(tlsSrv.URL+"/m2m"+query, SenderConfig{}), mensageria.IsUnavailable)
	check("DNS", send("http://mensageria-receiver.invalid/m2m"+query, SenderConfig{}), mensageria.IsUnavailable)

	busy := newTestSender(t, echo.URL+"/slow"+query, SenderConfig{MaxConcurrent: 1, Timeout: time.Second})
	go func() { _ = busy.Send(context.Background(), testDelivery()) }()
	<-slowArrived // the only slot is taken
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	err := busy.Send(ctx, testDelivery())
	check("no free slot", err, mensageria.IsUnavailable)
	if !strings.Contains(err.Error(), "waiting for one of the 1 requests") {
		t.Errorf("no free slot: %v", err)
	}
	cancel()

	bs, err := NewBatchSender(SenderConfig{URL: echo.URL + "/m2m" + query, Token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range bs.SendBatch(context.Background(), []*mensageria.Delivery{testDelivery(), testDelivery()}) {
		check("batch 502", err, mensageria.IsUnavailable)
	}
	bg, err := NewBatchSender(SenderConfig{URL: echo.URL + "/batch-garbage" + query, Token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range bg.SendBatch(context.Background(), []*mensageria.Delivery{testDelivery()}) {
		check("batch answer that is not one", err, nil)
	}

	p, err := NewProbe(ProbeConfig{URL: "http://" + closed + "/orders/{key}" + query})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Reconcile(context.Background(), testDelivery())
	check("probe refused", err, nil)

	_, err = NewSender(SenderConfig{URL: "ftp://gw" + query, Token: "tok-1"})
	check("config", err, func(err error) bool { return errors.Is(err, mensageria.ErrConfig) })
	_, err = NewProbe(ProbeConfig{URL: "http://gw/orders" + query})
	check("probe config", err, func(err error) bool { return errors.Is(err, mensageria.ErrConfig) })
}
