package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// What the fake Anthropic API answers with.
const (
	answerOK         = "ok"         // 200, a message
	answerOverloaded = "overloaded" // 529 overloaded_error, retry-after-ms
	answerThrottled  = "throttled"  // 429 rate_limit_error, retry-after-ms
	answerCutStream  = "cut"        // a stream cut after message_start
	answerStreamErr  = "streamerr"  // a 200 stream that carries an overloaded_error event
)

// retryAfterMs is what the fake asks the SDK to wait before a retry of a
// 529 or 429: short, so that the SDK's default retries run in
// milliseconds.
const retryAfterMs = "2"

// apiKey is the fake's key.
const apiKey = "sk-ant-fake-key"

// statusOverloaded is Anthropic's 529 Overloaded.
const statusOverloaded = 529

// fakeAnthropic is a tiny stand-in for the Anthropic API on 127.0.0.1:
// POST /v1/messages, plain and streamed.
type fakeAnthropic struct {
	srv  *httptest.Server
	hits atomic.Int64 // requests received

	mu     sync.Mutex
	answer string
}

func newFakeAnthropic() *fakeAnthropic {
	f := &fakeAnthropic{answer: answerOK}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", f.messages)
	f.srv = httptest.NewServer(mux)
	return f
}

// Close shuts the fake down.
func (f *fakeAnthropic) Close() { f.srv.Close() }

// baseURL is the base URL to give the SDK.
func (f *fakeAnthropic) baseURL() string { return f.srv.URL + "/" }

// key is the breaker key HostKey gives the fake's requests.
func (f *fakeAnthropic) key() string { return f.srv.Listener.Addr().String() }

// set sets what the fake answers with.
func (f *fakeAnthropic) set(answer string) {
	f.mu.Lock()
	f.answer = answer
	f.mu.Unlock()
}

func (f *fakeAnthropic) messages(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_fake")
	if r.Header.Get("X-Api-Key") != apiKey && r.Header.Get("Authorization") != "Bearer "+apiKey {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		return
	}
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	switch answer {
	case answerOverloaded:
		w.Header().Set("Retry-After-Ms", retryAfterMs)
		w.WriteHeader(statusOverloaded)
		fmt.Fprint(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	case answerThrottled:
		w.Header().Set("Retry-After-Ms", retryAfterMs)
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit."}}`)
	case answerCutStream, answerStreamErr:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "event: message_start\ndata: "+messageStart+"\n\n")
		w.(http.Flusher).Flush()
		if answer == answerCutStream {
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		}
		fmt.Fprint(w, "event: error\ndata: "+overloadedEvent+"\n\n")
	default:
		fmt.Fprint(w, message)
	}
}

const (
	message         = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-fake","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
	messageStart    = `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-fake","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":0}}}`
	overloadedEvent = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`
)
