package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
)

// What the fake OpenAI answers with.
const (
	answerOK        = "ok"        // 200, a chat completion
	answerBroken    = "broken"    // 500, OpenAI's JSON error
	answerThrottled = "throttled" // 429 rate_limit_exceeded, retry-after-ms
	answerCutStream = "cut"       // a stream cut after its first chunk
)

// retryAfterMs is what the fake asks the SDK to wait before a retry of a
// 500 or 429: short, so that the SDK's default retries run in
// milliseconds.
const retryAfterMs = "2"

// apiKey is the fake's key.
const apiKey = "sk-fake-key"

// fakeOpenAI is a tiny stand-in for the OpenAI API on 127.0.0.1: POST
// /v1/chat/completions, plain and streamed.
type fakeOpenAI struct {
	srv  *httptest.Server
	hits atomic.Int64 // requests received

	mu     sync.Mutex
	answer string
}

func newFakeOpenAI() *fakeOpenAI {
	f := &fakeOpenAI{answer: answerOK}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", f.chat)
	f.srv = httptest.NewServer(mux)
	return f
}

// Close shuts the fake down.
func (f *fakeOpenAI) Close() { f.srv.Close() }

// baseURL is the base URL to give the SDK.
func (f *fakeOpenAI) baseURL() string { return f.srv.URL + "/v1/" }

// key is the breaker key HostKey gives the fake's requests.
func (f *fakeOpenAI) key() string { return f.srv.Listener.Addr().String() }

// set sets what the fake answers with.
func (f *fakeOpenAI) set(answer string) {
	f.mu.Lock()
	f.answer = answer
	f.mu.Unlock()
}

func (f *fakeOpenAI) chat(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	if r.Header.Get("Authorization") != "Bearer "+apiKey {
		http.Error(w, `{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch answer {
	case answerBroken:
		w.Header().Set("Retry-After-Ms", retryAfterMs)
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`)
	case answerThrottled:
		w.Header().Set("Retry-After-Ms", retryAfterMs)
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"message":"Rate limit reached.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	case answerCutStream:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "data: "+chunk+"\n\n")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	default:
		fmt.Fprint(w, completion)
	}
}

const (
	completion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-fake","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]}`
	chunk      = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-fake","choices":[{"index":0,"delta":{"role":"assistant","content":"hel"},"finish_reason":null}]}`
)
