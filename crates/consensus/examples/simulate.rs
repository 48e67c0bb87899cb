//! The randomized simulator's command line:
//!
//! `cargo run --release -p slipstream-consensus --example simulate -- --seeds N [--members M] [--seed S]`
//!
//! Runs seeds S, S+1, ... S+N-1 (S defaults to 0) for M members (default:
//! each of 3, 5 and 7 in turn). Prints every failing seed with the command
//! that replays it, exits non-zero if any invariant was violated, and
//! prints, last, one JSON line with seeds run, steps, violations and
//! simulated steps per second. Optional `--safety-ms`, `--partition-ms`
//! (0 skips the lasting partial partition) and `--liveness-ms` change the
//! phase lengths.

use slipstream_consensus::simulation::{run_seed, RunOptions};
use std::process::ExitCode;
use std::time::Instant;

struct Args {
    seeds: u64,
    members: Option<usize>,
    seed: u64,
    safety_ms: Option<u64>,
    partition_ms: Option<u64>,
    liveness_ms: Option<u64>,
    verbose: bool,
    trace: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 100,
        members: None,
        seed: 0,
        safety_ms: None,
        partition_ms: None,
        liveness_ms: None,
        verbose: false,
        trace: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--verbose" {
            args.verbose = true;
            continue;
        }
        if flag == "--trace" {
            args.trace = true;
            continue;
        }
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--seeds" => args.seeds = number(&value)?,
            "--members" => args.members = Some(number(&value)? as usize),
            "--seed" => args.seed = number(&value)?,
            "--safety-ms" => args.safety_ms = Some(number(&value)?),
            "--partition-ms" => args.partition_ms = Some(number(&value)?),
            "--liveness-ms" => args.liveness_ms = Some(number(&value)?),
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.members.is_some_and(|m| m == 0 || m > 50) {
        return Err("--members must be between 1 and 50".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("simulate: {e}");
            eprintln!(
                "usage: simulate --seeds N [--members M] [--seed S] [--safety-ms MS] [--partition-ms MS] \
                 [--liveness-ms MS] [--trace] [--verbose]"
            );
            return ExitCode::from(2);
        }
    };
    let sizes: Vec<usize> = match args.members {
        Some(m) => vec![m],
        None => vec![3, 5, 7],
    };
    let started = Instant::now();
    let (mut runs, mut steps, mut violations, mut failed, mut simulated_ms, mut acked) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut elections, mut rollbacks, mut cycles, mut late) = (0u64, 0u64, 0u64, 0u64);
    let (mut crashes_in_step, mut owed_partitions, mut chain_partitions) = (0u64, 0u64, 0u64);
    let (mut reconfig_seeds, mut reconfigs_proposed, mut reconfigs_accepted) = (0u64, 0u64, 0u64);
    for &members in &sizes {
        for seed in args.seed..args.seed + args.seeds {
            let mut options = RunOptions::new(members, seed);
            if let Some(ms) = args.safety_ms {
                options.safety_ms = ms;
            }
            if let Some(ms) = args.partition_ms {
                options.partition_ms = ms;
            }
            if let Some(ms) = args.liveness_ms {
                options.liveness_ms = ms;
            }
            options.trace = args.trace;
            let report = run_seed(options);
            runs += 1;
            steps += report.steps;
            simulated_ms += report.simulated_ms;
            acked += report.acked_writes as u64;
            elections += report.elections;
            rollbacks += report.rollbacks;
            cycles += report.cycles_formed;
            late += report.late_commit_rollbacks;
            crashes_in_step += report.crashes_in_step;
            owed_partitions += u64::from(report.partition_owed_progress);
            chain_partitions += u64::from(report.partition_needs_chain);
            reconfig_seeds += u64::from(!report.profile.ends_with("reconfig=0"));
            reconfigs_proposed += report.reconfigs_proposed;
            reconfigs_accepted += report.reconfigs_accepted;
            if args.verbose {
                eprintln!(
                    "seed {seed} members {members}: {} steps, {} acked, {}",
                    report.steps, report.acked_writes, report.profile
                );
            }
            if !report.violations.is_empty() {
                failed += 1;
                violations += report.violations.len() as u64;
                println!(
                    "FAILED seed {seed} members {members} ({}; partition {})",
                    report.profile, report.partition
                );
                for line in &report.trace_tail {
                    println!("    {line}");
                }
                for v in &report.violations {
                    println!("  {v}");
                }
                println!(
                    "  replay: cargo run --release -p slipstream-consensus --example simulate -- --seeds 1 --members {members} --seed {seed}"
                );
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{{\"seeds_run\":{runs},\"members\":{:?},\"first_seed\":{},\"steps\":{steps},\"violations\":{violations},\"failed_seeds\":{failed},\"acked_majority_writes\":{acked},\"elections\":{elections},\"rollbacks\":{rollbacks},\"transient_sync_source_cycles\":{cycles},\"late_commit_rollbacks\":{late},\"crashes_in_step\":{crashes_in_step},\"partitions_owing_progress\":{owed_partitions},\"of_which_through_a_chain\":{chain_partitions},\"seeds_reconfiguring\":{reconfig_seeds},\"reconfigs_proposed\":{reconfigs_proposed},\"reconfigs_accepted\":{reconfigs_accepted},\"simulated_seconds\":{},\"wall_seconds\":{:.3},\"simulated_steps_per_second\":{:.0}}}",
        sizes,
        args.seed,
        simulated_ms / 1000,
        seconds,
        steps as f64 / seconds.max(1e-9)
    );
    if violations > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
