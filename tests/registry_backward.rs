//! `spmd-check registry dtensor`, the backward of its claims (SPEC.md
//! §22.6): DTensor's gradients of every claim on seeded instances,
//! recorded by peers/registry_backward_dtensor.py, judged here from the
//! per-rank values against torch.autograd.grad of the op on the global
//! tensors. The classes are pinned; the twins tamper with the recording as
//! a wrong backward would.

mod common;

use spmd_check::registry::{self, Class, File, Report, Row};

/// The recording with only the entries of `op`.
fn only_op(op: &str) -> File {
    let mut f = common::registry::recorded("dtensor");
    f.entries.retain(|e| e.op == op);
    assert!(!f.entries.is_empty(), "{op} is recorded");
    f
}

fn backward_row<'a>(rep: &'a Report, args: &str, placements: &str) -> &'a Row {
    rep.backward
        .iter()
        .find(|r| r.args == args && r.placements() == placements)
        .unwrap_or_else(|| panic!("({args}) {placements} has a backward row"))
}

#[test]
fn dtensor_backward_classifies_as_pinned() {
    let rep = common::registry::checked("dtensor");
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (2335, 1889, 6, 440),
        "{}",
        rep.backward
            .iter()
            .filter(|r| r.class != Class::Correct)
            .map(|r| format!(
                "{} {} {}: {}",
                r.shown_op(),
                r.placements(),
                r.class.word(),
                r.detail
            ))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // mul's gradients are checked and hold: a pending sum times a
    // replicated factor has a pending-sum gradient for that factor.
    let mul = only_op("aten.mul.Tensor");
    let rep = common::registry::check(mul);
    let r = backward_row(&rep, "", "P(sum), R -> P(sum)");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
    assert!(
        r.detail.contains("B1, B3 hold on 6 recorded instances"),
        "{}",
        r.detail
    );
}

/// A gradient off by a factor (every rank's value doubled, as a backward
/// that forgot a division would give) fails B3.
#[test]
fn a_doubled_gradient_is_incorrect() {
    let mut f = only_op("aten.mul.Tensor");
    let claim = ["S(0)", "S(0)", "S(0)"];
    for e in &mut f.entries {
        for c in e.backward.iter_mut().filter(|c| c.claim == claim) {
            let g = c.grads.as_mut().expect("grads")[0]
                .as_mut()
                .expect("a gradient");
            for t in g.per_rank.iter_mut().flatten() {
                *t = common::registry::doubled(t);
            }
        }
    }
    let rep = common::registry::check(f);
    let r = backward_row(&rep, "", "S(0), S(0) -> S(0)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B3 on 2 ranks"), "{}", r.detail);
    assert!(registry::any_incorrect(&rep));
}

/// A Replicate gradient whose ranks disagree is not well formed: B1.
#[test]
fn a_replicate_gradient_that_differs_per_rank_fails_b1() {
    let mut f = only_op("aten.mul.Tensor");
    // The first claim (and cotangent) with a Replicate gradient: rank 0's
    // copy of it replaced.
    let mut target = None;
    for e in &mut f.entries {
        for c in &mut e.backward {
            let key = (c.claim.clone(), c.cotangent_placement.clone());
            if target.as_ref().is_some_and(|t| *t != key) {
                continue;
            }
            let Some(g) = c
                .grads
                .iter_mut()
                .flatten()
                .flatten()
                .find(|g| g.placement == "R")
            else {
                continue;
            };
            let shape = g.per_rank[0]
                .as_deref()
                .and_then(|t| t.split_once(':'))
                .map(|(s, _)| s.to_string());
            let n: usize = shape
                .as_deref()
                .unwrap_or("1")
                .split('x')
                .map(|d| d.parse::<usize>().unwrap_or(1))
                .product();
            g.per_rank[0] = Some(format!(
                "{}:{}",
                shape.unwrap_or_default(),
                vec!["7"; n].join(",")
            ));
            target = Some(key);
        }
    }
    let (claim, cot) = target.expect("mul has a Replicate gradient somewhere");
    let rep = common::registry::check(f);
    let args = if cot == claim[0] {
        String::new()
    } else {
        format!("cotangent={cot}")
    };
    let placements = format!("{} -> {}", claim[1..].join(", "), claim[0]);
    let r = backward_row(&rep, &args, &placements);
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B1"), "{}", r.detail);
}

/// Where eager dispatch ran another strategy, or a value is not exact,
/// nothing is decided: undetermined, never correct.
#[test]
fn an_instance_that_does_not_run_the_claim_decides_nothing() {
    let mut f = only_op("aten.mul.Tensor");
    for e in &mut f.entries {
        for c in &mut e.backward {
            c.chose = Some("R".into());
        }
    }
    let rep = common::registry::check(f);
    let r = backward_row(&rep, "", "S(0), S(0) -> S(0)");
    assert_eq!(r.class, Class::Undetermined, "{}", r.detail);
    assert!(r.detail.contains("eager dispatch chose R"), "{}", r.detail);
}

/// DTensor.redistribute is the identity on global values: every pair it
/// accepts holds forward and backward on its instances, the pairs it
/// refuses are skipped with the refusal, and an output tampered to denote
/// something else fails F3.
#[test]
fn redistribute_is_the_identity_and_a_changed_output_fails_f3() {
    let f = only_op("DTensor.redistribute");
    let rep = common::registry::check(f.clone());
    assert!(rep.rows.is_empty(), "no forward claims");
    let t = registry::totals(&rep.backward);
    assert_eq!(
        (
            rep.backward.len(),
            t.get(&Class::Correct).copied().unwrap_or(0)
        ),
        (34, 34)
    );
    let r = backward_row(&rep, "", "P(max) -> S(0)");
    assert!(
        r.detail.starts_with("F1, F3, B1, B3 hold on 6"),
        "{}",
        r.detail
    );
    assert!(f
        .skipped
        .iter()
        .any(|s| s.op == "DTensor.redistribute R -> P(sum)" && s.why.contains("DTensor refuses")));

    let mut f = f;
    for e in &mut f.entries {
        for c in e
            .backward
            .iter_mut()
            .filter(|c| c.claim == ["R", "S(0)"] && c.cotangent_placement == "R")
        {
            let t = c.output[0].clone().expect("an exact output");
            c.output = vec![Some(common::registry::doubled(&t)); c.n];
        }
    }
    let rep = common::registry::check(f);
    let r = backward_row(&rep, "", "S(0) -> R");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 on 2 ranks"), "{}", r.detail);
}

/// Each claim run on a 2x2 mesh (SPEC.md §22.7): on mesh dim 0, dim 1 and
/// both. The pinned classes; a claim that is wrong on one dim is wrong on
/// 2x2 too; a tampered output fails F3.
#[test]
fn the_claims_on_a_2x2_mesh_classify_as_pinned() {
    let rep = common::registry::checked("dtensor");
    assert_eq!(
        common::registry::instance_totals(&rep.mesh2d),
        (4320, 3409, 98, 813),
        "{}",
        rep.mesh2d
            .iter()
            .filter(|r| r.class == Class::Incorrect)
            .map(|r| format!("{} {}: {}", r.shown_op(), r.placements(), r.detail))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every incorrect 2x2 row is a claim already incorrect on one dim.
    for r in rep.mesh2d.iter().filter(|r| r.class == Class::Incorrect) {
        assert!(
            [
                "aten.linalg__powsum.default",
                "aten.linalg_vector_norm.default",
                "aten.norm.Scalar",
                "aten.threshold.default"
            ]
            .contains(&r.op.as_str()),
            "{} {}: {}",
            r.shown_op(),
            r.placements(),
            r.detail
        );
    }

    let mut f = only_op("aten.mul.Tensor");
    let rep = common::registry::check(f.clone());
    let r = rep
        .mesh2d
        .iter()
        .find(|r| {
            r.args == "mesh both" && r.placements() == "(S(0), S(0)), (S(0), S(0)) -> (S(0), S(0))"
        })
        .expect("mul on both dims");
    assert_eq!(r.class, Class::Correct, "{}", r.detail);
    for e in &mut f.entries {
        for c in e
            .mesh2d
            .iter_mut()
            .filter(|c| c.at == "both" && c.claim == ["S(0)", "S(0)", "S(0)"])
        {
            c.output[3] = c.output[0].clone();
        }
    }
    let rep = common::registry::check(f);
    let r = rep
        .mesh2d
        .iter()
        .find(|r| {
            r.args == "mesh both" && r.placements() == "(S(0), S(0)), (S(0), S(0)) -> (S(0), S(0))"
        })
        .expect("mul on both dims");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("F3 on 2x2"), "{}", r.detail);
}

/// The recording is untrusted: a 2x2 instance with a placement that is
/// none is refused on reading, naming the entry (exit 2); a backward
/// instance with too many inputs decides nothing, and nothing panics.
#[test]
fn malformed_backward_and_2x2_instances_are_named_or_left_unchecked() {
    let mut f = only_op("aten.mul.Tensor");
    f.entries[0].mesh2d[0].chose = Some(vec!["S(0)".into(), "Sideways".into()]);
    let dir = common::fresh_dir("registry_backward", "bad_2x2");
    let p = dir.join("bad.json");
    std::fs::write(&p, serde_json::to_string(&f).unwrap()).unwrap();
    let (code, _, err) = common::run(&["registry", "dtensor", "--file", p.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("entry 0") && err.contains("2x2"), "{err}");

    let mut f = only_op("aten.mul.Tensor");
    for e in &mut f.entries {
        for c in &mut e.backward {
            let extra = c.inputs[0].clone();
            c.inputs.push(extra);
        }
    }
    let rep = common::registry::check(f);
    assert!(rep.backward.iter().all(|r| r.class == Class::Undetermined));

    // An input, or a redistribute output, with no value per rank.
    let mut f = only_op("aten.mul.Tensor");
    for e in &mut f.entries {
        for c in &mut e.backward {
            c.inputs[0].clear();
        }
    }
    let rep = common::registry::check(f);
    assert!(rep.backward.iter().all(|r| r.class == Class::Undetermined));
    // Without the outputs no row may say F1, F3 held: rows with only
    // instances whose global value is exact are undetermined, the others
    // (an average over 3 ranks is not exact) say B1, B3 alone.
    let mut f = only_op("DTensor.redistribute");
    for e in &mut f.entries {
        for c in &mut e.backward {
            c.output.clear();
        }
    }
    let rep = common::registry::check(f);
    assert!(rep
        .backward
        .iter()
        .all(|r| r.class == Class::Undetermined || r.detail.starts_with("B1, B3 hold")));
    assert!(rep.backward.iter().any(|r| r.class == Class::Undetermined));
}

/// JAX's transposes of its elementwise primitives (SPEC.md §22.6): no
/// gradient is wrong on the recorded instances; erf's raises inside
/// shard_map (and with it exact gelu's); a doubled gradient fails B3.
#[test]
fn jax_elementwise_transposes_classify_as_pinned() {
    let mut f = common::registry::recorded("jax");
    f.entries.retain(|e| e.family == "elementwise");
    let rep = common::registry::check(f.clone());
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (111, 57, 0, 54)
    );
    let erf = rep
        .backward
        .iter()
        .find(|r| r.op == "lax.erf")
        .expect("erf's transpose");
    assert_eq!(erf.class, Class::Undetermined);
    assert!(
        erf.detail
            .contains("Primitive polynomial requires varying manual axes"),
        "{}",
        erf.detail
    );

    f.entries.retain(|e| e.op == "lax.mul" && e.args.is_empty());
    common::registry::assert_doubled_gradients_fail_b3(f);
}

/// JAX's transposes of its reductions and shape primitives (SPEC.md
/// §22.6): the linear ones on unreduced inputs hold; where JAX types an
/// unreduced operand's output invariant (cumsum, rev) its own vjp asks for
/// a reduced cotangent and refuses the invariant one its type calls for
/// (peers/repro_jax_transposes.py); a doubled gradient of reduce_sum fails
/// B3.
#[test]
fn jax_tensor_transposes_classify_as_pinned() {
    let mut f = common::registry::recorded("jax");
    f.entries
        .retain(|e| matches!(e.family.as_str(), "reduction" | "shape" | "contraction"));
    let rep = common::registry::check(f.clone());
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (60, 17, 0, 43)
    );
    let held = |op: &str| {
        rep.backward
            .iter()
            .filter(|r| r.op == op)
            .all(|r| r.class == Class::Correct)
    };
    for op in [
        "lax.reduce_sum",
        "lax.transpose",
        "lax.reshape",
        "lax.slice",
    ] {
        assert!(held(op), "{op}");
    }
    let cumsum = rep
        .backward
        .iter()
        .find(|r| r.op == "lax.cumsum")
        .expect("cumsum's transpose");
    assert_eq!(cumsum.class, Class::Undetermined);
    assert!(
        cumsum.detail.contains("Expected cotangent type"),
        "{}",
        cumsum.detail
    );

    f.entries.retain(|e| e.op == "lax.reduce_sum");
    common::registry::assert_doubled_gradients_fail_b3(f);
}

/// `DTensor.from_local` and `to_local` (SPEC.md §22.6): their gradients
/// hold for Shard, Replicate and Partial(sum), and for to_local with
/// `grad_placements=[Partial()]` on a Replicate input (the per-rank
/// cotangents summed); from_local onto Partial(avg|max|min) hands every
/// rank the whole cotangent, where the derivative of a mean is 1/n of it
/// and that of a max is zero off the rank holding it (B3;
/// peers/repro_dtensor_backward.py shows it). Twins: a doubled gradient of
/// a correct row fails B3, and a local gradient whose ranks differ in
/// shape is not well formed (B1).
#[test]
fn from_local_and_to_local_classify_as_pinned() {
    let mut f = common::registry::recorded("dtensor");
    f.entries.retain(|e| e.family == "local");
    let rep = common::registry::check(f.clone());
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (17, 11, 6, 0)
    );
    for r in &rep.backward {
        let wrong = r.op == "DTensor.from_local"
            && ["P(avg)", "P(max)", "P(min)"].contains(&r.output.as_str());
        let want = if wrong {
            Class::Incorrect
        } else {
            Class::Correct
        };
        assert_eq!(
            r.class,
            want,
            "{} {}: {}",
            r.shown_op(),
            r.placements(),
            r.detail
        );
        if wrong {
            assert!(r.detail.starts_with("B3 on 2 ranks"), "{}", r.detail);
        }
    }
    let avg = backward_row(&rep, "", "local -> P(avg)");
    assert!(
        avg.detail
            .contains("the gradient of the op on the global tensors is 2x2x2:-1/8,"),
        "{}",
        avg.detail
    );
    // Each incorrect row has a script, and the recording says it reproduced
    // in DTensor (peers/record_registry.sh runs them).
    let scripts = registry::backward_repros(&rep);
    assert_eq!(scripts.len(), 6);
    for (r, s) in &scripts {
        let s = s.as_ref().expect("a script");
        assert!(s.contains("DTensor.from_local(leaf, mesh"), "{s}");
        assert!(
            r.detail
                .contains("; reproduced in the framework: reproduced: input 0's gradient"),
            "{}",
            r.detail
        );
    }
    // A counterexample its script did not reproduce decides nothing.
    let mut g = f.clone();
    for o in &mut g.backward_repros {
        o.reproduced = false;
    }
    let rep = common::registry::check(g);
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (17, 11, 0, 6)
    );
    assert!(rep
        .backward
        .iter()
        .filter(|r| r.class == Class::Undetermined)
        .all(|r| r.detail.contains("did not reproduce it in the framework")));

    let tampered = |op: &str, claim: [&str; 2], how: fn(&mut Vec<Option<String>>)| {
        let mut f = f.clone();
        f.entries.retain(|e| e.op == op);
        common::registry::tamper_gradients(&mut f, Some(&claim), |g| how(&mut g.per_rank));
        common::registry::check(f)
    };
    let double: fn(&mut Vec<Option<String>>) = |ts| {
        for t in ts.iter_mut().flatten() {
            *t = common::registry::doubled(t);
        }
    };
    let rep = tampered("DTensor.from_local", ["P(sum)", "local"], double);
    let r = backward_row(&rep, "", "local -> P(sum)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B3"), "{}", r.detail);
    let rep = tampered("DTensor.to_local", ["S(0)", "S(0)"], double);
    let r = backward_row(&rep, "", "S(0) -> S(0)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B3"), "{}", r.detail);
    let rep = tampered("DTensor.from_local", ["S(0)", "local"], |ts| {
        ts[0] = Some("1:1".into());
    });
    let r = backward_row(&rep, "", "local -> S(0)");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B1"), "{}", r.detail);
}

/// spmd_types' backward of its local ops (SPEC.md §22.6): torch's per-rank
/// VJP read in the gradient types spmd_types gives (R -> P, P -> R, S(d) ->
/// S(d)) holds for every claim whose global gradient is exact. Twins: a
/// gradient of an R input read as R (the duality forgotten) is not well
/// formed where the per-rank cotangents differ (B1), and a doubled gradient
/// fails B3.
#[test]
fn spmd_types_local_backward_classifies_as_pinned() {
    let mut f = common::registry::recorded("spmd_types");
    f.entries.retain(|e| e.family != "collective");
    let rep = common::registry::check(f.clone());
    assert_eq!(
        common::registry::instance_totals(&rep.backward),
        (513, 507, 0, 6)
    );
    assert!(rep
        .backward
        .iter()
        .filter(|r| r.class == Class::Undetermined)
        .all(|r| r.op.contains("div") && r.detail.contains("not exact in float64")));

    f.entries
        .retain(|e| e.op == "torch.add" && e.args.is_empty());
    let mut forgot = f.clone();
    common::registry::tamper_gradients(&mut forgot, None, |g| {
        if g.placement == "P(sum)" {
            g.placement = "R".into();
        }
    });
    let rep = common::registry::check(forgot);
    let r = backward_row(&rep, "cotangent=P(sum)", "R, R -> R");
    assert_eq!(r.class, Class::Incorrect, "{}", r.detail);
    assert!(r.detail.starts_with("B1"), "{}", r.detail);
    common::registry::assert_doubled_gradients_fail_b3(f);
}
