//! The command line's grammar: the subcommands, their flags and help
//! texts (clap), and how the scope flags become a scope. `main.rs` runs
//! what is parsed here.

use clap::{Args, Parser, Subcommand};
use spmd_check::report;
use spmd_generators::Scope;

#[derive(Parser)]
#[command(
    name = "spmd-check",
    version,
    about = "Exact, exhaustive checking of SPMD sharding type rules"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Args, Clone)]
pub(crate) struct ScopeArgs {
    /// Preset for the exhaustive part: small (fast), default, large (slow).
    #[arg(long, value_parser = ["small", "default", "large"], default_value = "default")]
    scope: String,
    /// Mesh x shape cases where an input has more free scalars than this are not enumerated.
    #[arg(long, default_value_t = 4)]
    max_free: usize,
    /// Mesh x shape cases with more grid points than this are not enumerated.
    #[arg(long, default_value_t = 256)]
    max_points: u64,
    /// Refuse runs estimated above this many instances (at most 100,000,000:
    /// beyond, a run would not finish, so the estimate refuses it).
    #[arg(long, default_value_t = 20_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    max_instances: u64,
    /// Tensors of rank 0 up to this (1 to 4).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=4))]
    max_rank: u64,
    /// Tensor dims 1 up to this (1 to 8).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=8))]
    max_dim: u64,
    /// Also dims equal to each mesh axis size and rank count, so that a
    /// scatter on 4 or 8 ranks has a dim to split.
    #[arg(long)]
    mesh_dims: bool,
}

impl ScopeArgs {
    /// The scope of `derive --partial` (SPEC.md §21.2): its own defaults
    /// (1-4 ranks, shapes up to [2, 2], 50,000 points per case); `--scope
    /// small` keeps 1-2 ranks, and `--max-points`, `--max-rank`, `--max-dim`
    /// replace its caps where given other than their defaults.
    pub(crate) fn partial_scope(&self) -> spmd_check::partial_kinds::Scope {
        // The defaults of the flags below (their `default_value_t`).
        let (points, rank, dim) = (256, 2, 3);
        let mut s = spmd_check::partial_kinds::Scope::default();
        if self.scope == "small" {
            s.ranks.retain(|&r| r <= 2);
        }
        if self.max_points != points {
            s.max_points = self.max_points;
        }
        if self.max_rank != rank || self.max_dim != dim {
            let (rank, dim) = (self.max_rank as usize, self.max_dim as usize);
            s.shapes = (0..=rank)
                .flat_map(|r| spmd_generators::tuples(&(1..=dim).collect::<Vec<_>>(), r))
                .collect();
        }
        s
    }
    pub(crate) fn scope(&self) -> Scope {
        // Presets set the caps; explicit --max-free / --max-points override them.
        let (free, points) = match self.scope.as_str() {
            "large" => (6, 4096),
            _ => (4, 256),
        };
        let mut d = Scope::default();
        if self.scope == "small" {
            // Meshes of at most 2 ranks per axis.
            d.meshes.retain(|m| m.axes.iter().all(|a| a.size <= 2));
        }
        let free = if self.max_free != d.max_free {
            self.max_free
        } else {
            free
        };
        let points = if self.max_points != d.max_points {
            self.max_points
        } else {
            points
        };
        Scope {
            max_free: free,
            max_points: points,
            max_instances: self.max_instances,
            max_rank: self.max_rank as usize,
            max_dim: self.max_dim as usize,
            mesh_dims: self.mesh_dims,
            ..d
        }
    }
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Derive the complete table of typings of a local op on one mesh axis.
    Derive {
        /// A built-in op (mul, add, sum, matmul, ...).
        op: Option<String>,
        /// A local function instead, e.g. "x * y + 1" (a leading minus is
        /// part of it: `--expr -x`).
        #[arg(long, allow_hyphen_values = true)]
        expr: Option<String>,
        /// Global SPMD types: Varying axes shard a tensor dim, written S(d),
        /// and the meaning is the op on global tensors (the shard
        /// propagation table).
        #[arg(long)]
        global: bool,
        /// Beside each typing, what this system's typing function does and
        /// how it compares (spmd_types, jax, dtensor, ltensor, nabla).
        #[arg(long)]
        dialect: Option<String>,
        /// Instead, the table of pending reductions of this kind (sum, avg,
        /// max, min): which outputs defer it (SPEC.md §21.2).
        #[arg(long)]
        partial: Option<String>,
        /// Instead, every typing on uneven shards split by this rule (chunk,
        /// ceil, divmod), checked forward on uneven cases (SPEC.md §23.14).
        #[arg(long, value_name = "RULE")]
        uneven: Option<String>,
        /// Print the result as JSON instead of text (the same as --format json).
        #[arg(long)]
        json: bool,
        /// The report's format: text (default), json, markdown (tables for
        /// pull requests and docs) or junit (JUnit XML for CI: a testcase per
        /// row, a failure for each one that is not sound, skipped if vacuous).
        #[arg(long, value_name = "FORMAT", value_parser = report::Format::NAMES)]
        format: Option<String>,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Check every seed system's rule table (the conformance suite).
    Conform {
        /// Only one system: spmd_types, jax, dtensor, ltensor, nabla.
        #[arg(long)]
        dialect: Option<String>,
        /// Instead, the transformer-block table: each op on each type
        /// (SPEC.md §19.7).
        #[arg(long)]
        transformer: bool,
        /// Print the result as JSON instead of text (the same as --format json).
        #[arg(long)]
        json: bool,
        /// The report's format: text (default), json, markdown (tables for
        /// pull requests and docs) or junit (JUnit XML for CI: a testcase per
        /// row, a failure for each one that makes conform exit 1).
        #[arg(long, value_name = "FORMAT", value_parser = report::Format::NAMES)]
        format: Option<String>,
        /// Check only part K of N (1-based): rows whose index i has
        /// i mod N = K - 1; `merge` joins the parts' --json (SPEC.md §18.3).
        #[arg(long, value_name = "K/N")]
        partition: Option<String>,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Every catalogue op, or composition of two, that is a correct transpose
    /// of a collective or cast, cheapest first.
    Transposes {
        /// The forward, e.g. "all_gather(dim=0)".
        op: String,
        /// Its source state on the mesh axis.
        #[arg(long)]
        from: String,
        /// Its destination state.
        #[arg(long)]
        to: String,
        /// State names: spmd_types (default), jax, dtensor, nabla, canonical.
        #[arg(long, default_value = "spmd_types")]
        dialect: String,
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Check the typing rules of rule files (TOML or JSON): a verdict or a
    /// minimal counterexample per rule.
    Check {
        /// Rule files.
        #[arg(required = true)]
        files: Vec<String>,
        /// Seed of the random part.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Random cases beyond the exhaustive scope, per rule (at most 1,000,000).
        #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
        cases: u32,
        /// Print the result as JSON instead of text (the same as --format json).
        #[arg(long)]
        json: bool,
        /// The report's format: text (default), json, markdown (tables for
        /// pull requests and docs) or junit (JUnit XML for CI: a testcase per
        /// row, a failure for each one that is not sound, skipped if vacuous).
        #[arg(long, value_name = "FORMAT", value_parser = report::Format::NAMES)]
        format: Option<String>,
        /// Print each counterexample as a paste-ready Rust test (rstest), or
        /// write it as a runnable JAX or PyTorch script (SPEC.md §20.2).
        #[arg(long, value_parser = ["rstest", "jax", "pytorch"])]
        emit: Option<String>,
        /// Where --emit jax|pytorch writes its scripts.
        #[arg(long, default_value = ".")]
        emit_dir: String,
        /// Exit 0 even when a rule is vacuous or undetermined (default: 3).
        #[arg(long)]
        allow_vacuous: bool,
        /// Stop checking after this many seconds; unfinished rules are
        /// undetermined.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=604_800))]
        time_limit: Option<u64>,
        /// Check only part K of N (1-based): rules whose index i, counted
        /// over all files, has i mod N = K - 1 (SPEC.md §18.3).
        #[arg(long, value_name = "K/N")]
        partition: Option<String>,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Join the --json outputs of `check` or `conform` run with
    /// --partition 1/N .. N/N into the single run's JSON, with its exit code.
    Merge {
        /// The parts' --json outputs, one file each.
        #[arg(required = true)]
        files: Vec<String>,
        /// As for `check`: exit 0 even when a rule is vacuous or undetermined.
        #[arg(long)]
        allow_vacuous: bool,
    },
    /// Replay the real systems' recorded behaviour (tests/fixtures, made by
    /// peers/record.sh) through the model and classify every case.
    Fidelity {
        /// The fixtures directory (default: this checkout's tests/fixtures).
        #[arg(long)]
        dir: Option<String>,
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also list every agreeing case.
        #[arg(long)]
        all: bool,
    },
    /// Check what an installed library registers against its own kernel:
    /// every claim of DTensor's pointwise sharding strategies, from a
    /// recorded registry file or --live (SPEC.md §22)
    Registry {
        /// The system: dtensor
        system: String,
        /// Only ops whose name matches this glob (`*`, `?`), e.g. `aten.threshold*`
        #[arg(long)]
        op: Option<String>,
        /// Show only the incorrect claims (the totals still count every row)
        #[arg(long, conflicts_with = "all")]
        incorrect_only: bool,
        /// List every row (every claim and missing combination) instead of a
        /// line per op followed by the incorrect claims
        #[arg(long)]
        all: bool,
        /// Do not search unregistered input placements for outputs that hold
        /// (the `missing` rows)
        #[arg(long)]
        no_missing: bool,
        /// The registry file (default: this checkout's tests/fixtures/registry/SYSTEM.json)
        #[arg(long, conflicts_with = "live")]
        file: Option<String>,
        /// Run the installed library through its peer script (the Python of
        /// SPMD_CHECK_TORCH_PYTHON) instead of reading a recorded file
        #[arg(long)]
        live: bool,
        /// Write the registry file, its kernel rows pruned to those this run
        /// looked up (how tests/fixtures/registry is made)
        #[arg(long)]
        record: Option<String>,
        /// Write the kernel calls (shapes and input tensors) this run needed
        /// and the file lacks, as JSON, for the recorder to fill in
        /// (peers/record_registry.sh repeats until none is wanted)
        #[arg(long, value_name = "FILE")]
        want: Option<String>,
        /// Print, after the table, a PyTorch script per incorrect claim that
        /// runs its counterexample in the framework (with --json: a `repro`
        /// field per row)
        #[arg(long)]
        show_repro: bool,
        /// Write those scripts to this directory, one file per claim, with
        /// index.json naming each (peers/record_registry.sh runs them)
        #[arg(long)]
        repro_dir: Option<String>,
        /// Print the result as JSON instead of text (the same as --format json).
        #[arg(long)]
        json: bool,
        /// The report's format: text (default), json, markdown or junit (a
        /// testcase per row: incorrect fails, latent and undetermined are
        /// skipped)
        #[arg(long, value_name = "FORMAT", value_parser = report::Format::NAMES)]
        format: Option<String>,
    },
    /// Check the named patterns of examples/patterns/ (FSDP, ZeRO, DDP,
    /// Megatron, sequence parallel, MoE, FSDP x TP), their wrong twins, their
    /// traffic, and each system's typing of them (SPEC.md §17.4).
    Patterns {
        /// Only this system (default: every system).
        #[arg(long)]
        dialect: Option<String>,
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Generate every small program (1 to --depth steps), type it with one
    /// system's typing function and collective table, and check each
    /// accepted program end to end (SPEC.md §17).
    Programs {
        /// The system: spmd_types, jax, dtensor, ltensor, nabla.
        #[arg(long)]
        dialect: String,
        /// Most steps per program (1 to 3).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=3))]
        depth: u64,
        /// Instead of every program up to --depth, draw this many random
        /// programs with proptest and shrink the first unsound one.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        random: Option<u32>,
        /// Seed of --random.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Most steps of a --random program (1 to 8).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=8))]
        max_steps: u64,
        /// Check only the program classes whose index i has i mod N = K - 1;
        /// `merge` joins the parts' --json (SPEC.md §17.3, §18.3).
        #[arg(long, value_name = "K/N")]
        partition: Option<String>,
        /// Only generate, type and classify: print the counts and the
        /// number of classes the oracle would check, check nothing.
        #[arg(long)]
        dry_run: bool,
        /// Instead, every chain of up to --depth moves on uneven shards split
        /// by this rule (chunk, ceil, divmod), each step as the system runs
        /// it, checked F1 and B3 (SPEC.md §23.15).
        #[arg(long, value_name = "RULE")]
        uneven: Option<String>,
        /// Instead, every accepted program under vmap (every input batched
        /// at 0, and only the first), batched by the system's rules: V1 and
        /// both orders of grad and vmap (SPEC.md §24.11).
        #[arg(long)]
        vmap: bool,
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        scope: ScopeArgs,
    },
    /// Time the main jobs on this machine (SPEC.md §18): instances per
    /// second, thread scaling, the f64 floor, peak memory.
    Bench {
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Instead, the scopes users ask about, each once on every core:
        /// attention on 4 ranks, softmax and a gather on 8, a 4-input
        /// product, each system's programs at depth 3; with what each
        /// decided (SPEC.md §18)
        #[arg(long)]
        scopes: bool,
        /// Only the jobs whose name contains NAME (e.g. `derive mul`,
        /// `softmax`, `jax`); an unknown name lists the jobs and exits 2
        #[arg(long, value_name = "NAME")]
        only: Option<String>,
    },
    /// Run one rule, op or program on per-rank values from a job file (JSON
    /// or TOML): output, backward, traffic, and with --check the oracle.
    Run {
        /// The job file.
        job: String,
        /// Print the result as JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Also check this instance (F1-F3, B1-B3, J1); exit 1 on a violation.
        #[arg(long)]
        check: bool,
    },
    /// Print a shell completion script, e.g. `spmd-check completions bash >
    /// ~/.local/share/bash-completion/completions/spmd-check`.
    Completions {
        /// The shell: bash, elvish, fish, powershell or zsh.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of spmd-check, or with --dir write one
    /// page per command there.
    Man {
        /// Write spmd-check.1 and a page per subcommand (spmd-check-check.1,
        /// ...) into this existing directory instead of printing the top page.
        #[arg(long, value_name = "DIR")]
        dir: Option<String>,
    },
}
