// etcd-bench: the etcd side of issue 7's comparison ("64 connections:
// w:majority throughput >= 3x what a 3-member etcd cluster does for 1 KB
// puts"), measured on the same machine in the same run as Slipstream.
//
//	etcd-bench server <etcd flags...>   one etcd member (etcd's own main)
//	etcd-bench load --endpoints a,b,c --clients 64 --seconds 10 --value-bytes 1024
//
// `server` embeds etcdmain so that no etcd release binary has to be fetched:
// the Go module proxy is the only way etcd reaches this machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-bench server <etcd flags...> | load [flags]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "server":
		// etcdmain parses args[1:], as it would os.Args.
		etcdmain.Main(append([]string{"etcd"}, os.Args[2:]...))
	case "load":
		if err := load(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "etcd-bench load:", err)
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "etcd-bench: unknown subcommand %q\n", os.Args[1])
		os.Exit(2)
	}
}

type result struct {
	System      string  `json:"system"`
	EtcdVersion string  `json:"etcd_version"`
	Members     int     `json:"members"`
	Clients     int     `json:"clients"`
	Seconds     float64 `json:"seconds"`
	ValueBytes  int     `json:"value_bytes"`
	Ops         int     `json:"ops"`
	Errors      int64   `json:"errors"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50Us       int64   `json:"p50_us"`
	P99Us       int64   `json:"p99_us"`
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	endpoints := fs.String("endpoints", "127.0.0.1:2379", "comma-separated client URLs")
	clients := fs.Int("clients", 64, "concurrent clients, each with its own connection")
	seconds := fs.Float64("seconds", 10, "measured seconds")
	warmup := fs.Float64("warmup-seconds", 2, "unmeasured seconds before them")
	valueBytes := fs.Int("value-bytes", 1024, "bytes per value")
	fs.Parse(args)
	eps := strings.Split(*endpoints, ",")

	// One clientv3.Client per worker: a client multiplexes every request on
	// one gRPC connection, and issue 7 compares 64 MongoDB connections.
	conns := make([]*clientv3.Client, *clients)
	for i := range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			return fmt.Errorf("client %d: %w", i, err)
		}
		defer c.Close()
		conns[i] = c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	status, err := conns[0].Status(ctx, eps[0])
	if err != nil {
		cancel()
		return fmt.Errorf("status of %s: %w", eps[0], err)
	}
	members, err := conns[0].MemberList(ctx)
	cancel()
	if err != nil {
		return fmt.Errorf("member list: %w", err)
	}

	value := strings.Repeat("x", *valueBytes)
	start := time.Now()
	measureFrom := start.Add(time.Duration(*warmup * float64(time.Second)))
	measureTo := measureFrom.Add(time.Duration(*seconds * float64(time.Second)))
	var errs atomic.Int64      // measured window only
	var completed atomic.Int64 // every put, warmup too: for the progress lines
	latencies := make([][]time.Duration, *clients)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				t0 := time.Now()
				if !t0.Before(measureTo) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := c.Put(ctx, fmt.Sprintf("k-%d-%d", i, n), value)
				cancel()
				t1 := time.Now()
				completed.Add(1)
				// An op counts when it completes inside the window.
				if t1.Before(measureFrom) || t1.After(measureTo) {
					continue
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				latencies[i] = append(latencies[i], t1.Sub(t0))
			}
		}()
	}

	stop := make(chan struct{})
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				d := completed.Load()
				phase := "measure"
				if now.Before(measureFrom) {
					phase = "warmup"
				}
				fmt.Fprintf(os.Stderr, "%5.1fs %-7s %6d ops/s  errors %d\n",
					now.Sub(start).Seconds(), phase, d-last, errs.Load())
				last = d
			}
		}
	}()
	wg.Wait()
	close(stop)

	all := slices.Concat(latencies...)
	slices.Sort(all)
	pct := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		return all[int(p*float64(len(all)-1))].Microseconds()
	}
	line, _ := json.Marshal(result{
		System: "etcd", EtcdVersion: status.Version, Members: len(members.Members),
		Clients: *clients, Seconds: *seconds, ValueBytes: *valueBytes,
		Ops: len(all), Errors: errs.Load(),
		OpsPerSec: float64(int(float64(len(all))/(*seconds)*10)) / 10,
		P50Us:     pct(0.50), P99Us: pct(0.99),
	})
	fmt.Println(string(line))
	return nil
}
