// Command porcupine checks a register history for linearizability, one key
// at a time, with github.com/anishathalye/porcupine. The Python harness
// writes the history as JSON (one array of operations) and reads the
// verdict from stdout as one JSON object.
//
// Usage: porcupine -history ops.json -timeout 60s [-visualize out.html]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// absent is the register's value before any write: the document does not exist.
const absent = -1

// op is one completed or unknown client operation as the harness records it.
type op struct {
	Key     string `json:"key"`
	Client  int    `json:"client"`
	F       string `json:"f"` // read, write or cas
	Value   int64  `json:"value"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Ok      bool   `json:"ok"`      // a cas that matched, or any acknowledged op
	Unknown bool   `json:"unknown"` // no answer: it may or may not have taken effect
	Call    int64  `json:"call"`
	Ret     int64  `json:"ret"`
}

type input struct {
	F     string
	Value int64
	From  int64
	To    int64
}

type output struct {
	Ok      bool
	Unknown bool
	Value   int64
}

// step is a register with compare-and-set. An unknown operation returns at
// the end of time, so it may take effect anywhere after its call, or (placed
// last) never: either outcome is allowed for it.
func step(state, in, out interface{}) (bool, interface{}) {
	s := state.(int64)
	i := in.(input)
	o := out.(output)
	switch i.F {
	case "read":
		return o.Value == s, s
	case "write":
		return true, i.Value
	case "cas":
		if s == i.From {
			return o.Ok || o.Unknown, i.To
		}
		return !o.Ok, s
	}
	panic("unknown op " + i.F)
}

func describe(in, out interface{}) string {
	i := in.(input)
	o := out.(output)
	suffix := ""
	if o.Unknown {
		suffix = " ?"
	}
	switch i.F {
	case "read":
		return fmt.Sprintf("read -> %d%s", o.Value, suffix)
	case "write":
		return fmt.Sprintf("write %d%s", i.Value, suffix)
	default:
		return fmt.Sprintf("cas %d->%d ok=%v%s", i.From, i.To, o.Ok, suffix)
	}
}

func main() {
	historyPath := flag.String("history", "", "the history JSON file")
	timeout := flag.Duration("timeout", 60*time.Second, "how long the search may take per history")
	visualize := flag.String("visualize", "", "write an HTML visualization here when not linearizable")
	flag.Parse()
	raw, err := os.ReadFile(*historyPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var ops []op
	if err := json.Unmarshal(raw, &ops); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		ret := o.Ret
		if o.Unknown {
			ret = math.MaxInt64
		}
		byKey[o.Key] = append(byKey[o.Key], porcupine.Operation{
			ClientId: o.Client,
			Input:    input{F: o.F, Value: o.Value, From: o.From, To: o.To},
			Call:     o.Call,
			Output:   output{Ok: o.Ok, Unknown: o.Unknown, Value: o.Value},
			Return:   ret,
		})
	}
	model := porcupine.Model{
		Init:              func() interface{} { return int64(absent) },
		Step:              step,
		DescribeOperation: describe,
		DescribeState:     func(state interface{}) string { return fmt.Sprint(state.(int64)) },
	}
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	results := map[string]string{}
	valid := "Ok"
	for _, key := range keys {
		result, info := porcupine.CheckOperationsVerbose(model, byKey[key], *timeout)
		results[key] = string(result)
		if result == porcupine.Illegal {
			valid = "Illegal"
			if *visualize != "" {
				path := fmt.Sprintf("%s-%s.html", *visualize, key)
				if err := porcupine.VisualizePath(model, info, path); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
		} else if result == porcupine.Unknown && valid == "Ok" {
			valid = "Unknown"
		}
	}
	encoded, _ := json.Marshal(map[string]interface{}{"valid": valid, "keys": results})
	fmt.Println(string(encoded))
}
