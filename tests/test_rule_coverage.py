"""Every rule of spec/ is exercised by a test: in-process by its vectors
(tests/test_server_vectors.py runs each `<rule id>[<vector>]`), or, for rules whose checks
need a live process, by the tests named here. A rule nothing reaches fails this test."""
from __future__ import annotations

import importlib

from colibri.spec import load_spec
from conformance.checks import LIVE_ONLY

#: rule id -> tests that exercise it outside the in-process vector run
COVERED_ELSEWHERE = {
    "ops.bind.loopback-default": ["test_live_server:test_refuses_public_bind_without_key"],
    "ops.cancel.disconnect": ["test_live_server:test_disconnect_mid_stream_frees_the_slot_and_counts_a_cancel",
                              "test_live_server:test_disconnect_while_waiting_for_a_json_answer_cancels"],
    "ops.read-deadline": ["test_live_server:test_trickled_request_gets_408_and_is_dropped",
                          "test_admission:test_ops_read_deadline_covers_headers_and_body_together"],
    "ops.admission.bounded": ["test_admission:test_ops_admission_bounded_full_pool_answers_429_at_once",
                              "test_admission:test_ops_admission_bounded_trickling_clients_hold_no_thread",
                              "test_hostile_clients:test_ops_admission_bounded_one_address_leaves_the_spare_threads_to_others"],
    "ops.connections.per-client": ["test_admission:test_ops_connections_per_client_cap"],
    "ops.keepalive.idle": ["test_admission:test_ops_keepalive_idle_connection_outlasts_the_sdk_pool_expiry",
                           "test_admission:test_an_idle_connection_is_closed_after_keepalive_without_a_thread"],
    "s1.scoring.interleaved-cancellable": [
        "test_systemone:test_s1_scoring_interleaved_cancellable_a_chat_is_answered_while_questions_are_scored",
        "test_systemone:test_s1_scoring_interleaved_cancellable_a_cancelled_request_stops_between_passes",
        "test_systemone:test_s1_scoring_interleaved_cancellable_a_client_that_hangs_up_cancels_its_scoring"],
    "ops.loop.never-waits": ["test_hostile_clients:test_ops_loop_never_waits_on_a_client_that_neither_reads_nor_closes",
                             "test_hostile_clients:test_ops_loop_never_waits_half_closed_client_gets_its_answer",
                             "test_hostile_clients:test_ops_loop_never_waits_a_short_wait_stays_short"],
    "ops.body.every-framing": ["test_hostile_clients:test_ops_body_every_framing_chunked_body_over_the_limit_is_413",
                               "test_hostile_clients:test_ops_body_every_framing_last_chunk_with_extension_and_trailers_is_served",
                               "test_framing:test_ops_body_every_framing_limits"],
    "ops.buffer.bounded": ["test_hostile_clients:test_ops_buffer_bounded_partial_bodies_from_one_address"],
    "ops.connections.cap-at-accept": ["test_hostile_clients:test_ops_connections_cap_at_accept_idle_sockets_cannot_lock_others_out"],
    "ops.refused.no-drain": ["test_hostile_clients:test_ops_refused_no_drain_huge_content_length_holds_no_thread",
                             "test_hostile_clients:test_ops_refused_no_drain_expect_continue_without_a_body_holds_no_thread"],
    "ops.http-errors.envelope": ["test_hostile_clients:test_ops_http_errors_envelope"],
    "ops.prefix-reuse.scope": [
        "test_slot_choice:test_ops_prefix_reuse_scope_conversation_reuses_only_its_own_conversation",
        "test_slot_choice:test_ops_prefix_reuse_scope_off_reuses_nothing"],
    "ops.kv-persistence": ["test_live_server:test_kv_state_survives_a_restart_and_a_torn_file_is_discarded"],
    "diff.greedy.exact": ["test_differential:test_diff_greedy_exact_a_server_against_itself_passes_every_prompt",
                          "test_differential:test_diff_greedy_exact_continuation_outside_the_top_tokens_fails"],
    "diff.greedy.rounded": ["test_differential:test_diff_greedy_rounded_divergence_at_a_near_tie_passes_with_its_margin",
                            "test_differential:test_diff_greedy_rounded_a_server_writing_something_else_fails_with_evidence"],
    "diff.logprobs.close": ["test_differential:test_diff_logprobs_close_judges_the_mean_along_the_shared_tokens",
                            "test_differential:test_diff_logprobs_close_a_server_with_shifted_numbers_fails_while_its_text_passes"],
    "prompt.template.refusal": ["test_chat_template:test_prompt_template_refusal_is_a_named_400_in_each_envelope",
                                "test_chat_template:test_templates_render_under_transformers_whitespace_rules"],
    "diff.template.agrees": ["test_differential:test_diff_template_agrees_a_server_against_itself",
                             "test_differential:test_diff_template_agrees_a_dropped_system_turn_fails_with_both_renderings"],
    "load.requests.none-lost": ["test_load_rules:test_load_requests_none_lost_a_reset_and_a_cut_stream_fail",
                                "test_load_live:test_load_rules_pass_on_colibri_serve_under_load"],
    "load.saturation.no-5xx": ["test_load_rules:test_load_saturation_no_5xx_a_503_a_timeout_and_a_hang_fail",
                               "test_load_live:test_load_rules_pass_on_colibri_serve_under_load"],
    "load.saturation.retry-after": [
        "test_load_rules:test_load_saturation_retry_after_a_429_without_header_or_envelope_fails",
        "test_load_rules:test_load_saturation_retry_after_passes_on_good_refusals_and_is_inconclusive_without_any"],
    "load.disconnect.frees-capacity": ["test_load_rules:test_load_disconnect_frees_capacity",
                                       "test_load_live:test_load_rules_pass_on_colibri_serve_under_load"],
    "load.greedy.near-tie": ["test_load_rules:test_load_greedy_near_tie_a_flip_at_a_near_tie_passes_a_confident_one_fails"],
    "load.greedy.divergence-rate": ["test_load_rules:test_load_greedy_divergence_rate_is_reported_as_non_strict"],
    "load.greedy.bit-identical": [
        "test_load_rules:test_load_greedy_bit_identical_log_probabilities_count_only_when_promised",
        "test_load_live:test_load_rules_pass_on_colibri_serve_under_load"],
    "tools.args.typed": ["test_tool_parsers:test_each_family_template_renders_calls_its_parser_reads_back",
                         "test_tool_parsers:test_glm_xml_typed_values_and_verbatim_strings"],
}
#: Rules not reached yet. Listed so a gap is visible, and so this test fails when a new rule
#: joins them or when one of them gets its test.
NOT_YET: set[str] = set()


def _runs_in_process(vector) -> bool:
    return not set(vector.expect.get("checks", [])) & LIVE_ONLY


def test_every_rule_is_reached():
    spec = load_spec()
    unreached = set()
    for rule in spec.rules:
        if rule.level == "INFO" and not rule.vectors:
            continue
        if any(_runs_in_process(v) for v in rule.vectors):
            continue
        tests = COVERED_ELSEWHERE.get(rule.id, [])
        for ref in tests:
            module, name = ref.split(":")
            assert callable(getattr(importlib.import_module(module), name, None)), f"{rule.id}: {ref} does not exist"
        if not tests:
            unreached.add(rule.id)
    assert unreached == NOT_YET
