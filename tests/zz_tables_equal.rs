// Before the consts go: the TOML tables are exactly the old rows.
use spmd_check::conform::{Claim, SEED_RULES};
use spmd_check::jvps::{JvpOp, WrongJvp, JVP_ROWS};
use spmd_dialects::tables as t;

#[test]
fn toml_tables_equal_the_old_consts() {
    for sys in t::SYSTEMS {
        let old: Vec<_> = SEED_RULES.iter().filter(|r| r.system == *sys).collect();
        let new: Vec<_> = t::seed_rules()
            .iter()
            .filter(|r| r.system == *sys)
            .collect();
        assert_eq!(old.len(), new.len(), "{sys}");
        for (o, n) in old.iter().zip(&new) {
            assert_eq!(o.id, n.id);
            assert_eq!(o.system, n.system);
            assert_eq!(o.dialect, n.dialect, "{}", o.id);
            assert_eq!(o.rule, n.rule, "{}", o.id);
            assert_eq!(o.op, n.op, "{}", o.id);
            assert_eq!(o.inputs, n.inputs.as_slice(), "{}", o.id);
            assert_eq!(o.output, n.output, "{}", o.id);
            let c = match o.claim {
                Claim::Allowed => t::Claim::Allowed,
                Claim::Forbidden => t::Claim::Forbidden,
                Claim::Unlisted => t::Claim::Unlisted,
            };
            assert_eq!(c, n.claim, "{}", o.id);
            assert_eq!(o.expect, n.expect, "{}", o.id);
            match (o.twin, &n.twin) {
                (None, None) => {}
                (Some(a), Some(b)) => {
                    assert_eq!(a.op, b.op, "{}", o.id);
                    assert_eq!(a.inputs, b.inputs.as_slice(), "{}", o.id);
                    assert_eq!(a.output, b.output, "{}", o.id);
                    assert_eq!(a.fails, b.fails, "{}", o.id);
                }
                _ => panic!("{}: twin differs", o.id),
            }
        }
        let old: Vec<_> = JVP_ROWS.iter().filter(|r| r.system == *sys).collect();
        let new: Vec<_> = t::jvp_rows().iter().filter(|r| r.system == *sys).collect();
        assert_eq!(old.len(), new.len(), "{sys}");
        for (o, n) in old.iter().zip(&new) {
            assert_eq!(o.id, n.id);
            assert_eq!(o.system, n.system);
            assert_eq!(o.rule, n.rule, "{}", o.id);
            match (o.op, &n.op) {
                (JvpOp::Local(a), t::JvpOp::Local(b)) => assert_eq!(a, b),
                (JvpOp::Collective(a), t::JvpOp::Collective(b)) => assert_eq!(a, b),
                _ => panic!("{}: op differs", o.id),
            }
            assert_eq!(o.inputs, n.inputs.as_slice(), "{}", o.id);
            assert_eq!(o.output, n.output, "{}", o.id);
            assert_eq!(o.jvp, n.jvp, "{}", o.id);
            assert_eq!(o.expect, n.expect, "{}", o.id);
            match (o.twin, &n.twin) {
                (WrongJvp::Text(a), t::WrongJvp::Text(b)) => assert_eq!(a, b),
                (WrongJvp::ReduceAgain, t::WrongJvp::ReduceAgain) => {}
                _ => panic!("{}: twin differs", o.id),
            }
        }
    }
    assert_eq!(SEED_RULES.len(), t::seed_rules().len());
    assert_eq!(JVP_ROWS.len(), t::jvp_rows().len());
}
