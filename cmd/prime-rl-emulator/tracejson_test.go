package main

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// The emulator's hand-written record is byte for byte what encoding/json writes of the same
// record, whatever the text and numbers in it.
func TestTraceRecordIsWhatEncodingJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		tr := emulatedTrace(emulatedTask(i, i%5, rng), float64(i%2), rng)
		tr.Nodes[1].Message = textMessage{Role: "user", Content: []string{
			"plain", "quote \" backslash \\ newline \n tab \t cr \r", "\b\f\x00\x1f <html> & more",
			"ünïcödé ✓ 🎉", "bad \xff\xfe utf-8", "line\u2028sep\u2029para", ""}[i%7]}
		tr.Nodes[2].Logprobs = append(tr.Nodes[2].Logprobs, 0, -0.5, 1e-7, -3e-9, 1e21, 123456789.125, math.SmallestNonzeroFloat64)
		if i%3 == 0 {
			tr.Nodes[0].Logprobs = nil
		}
		tr.Rewards["format"] = wireReward{Score: 0.25, Weight: 0.5}
		want, err := json.Marshal(tr)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}
