// infer — a batch's plan (batch_plan.hpp).
#include "batch_plan.hpp"

#include <ringattn/error.hpp>
#include <ringattn/layout.hpp>
#include <ringattn/packing.hpp>

#include <algorithm>
#include <iterator>
#include <string>

namespace infer {

namespace {

// Every rank's rows of the packed batch: balanced by prompt (shard_documents), or cut by
// a layout over the whole packed sequence, each row with the prompt it belongs to.
std::vector<ringattn::PackedShard> shard_batch(const std::vector<std::int64_t>& cu, int world,
                                               const std::optional<ringattn::Layout>& layout) {
  if (!layout) return ringattn::shard_documents(cu, world);
  const std::vector<std::int32_t> ids = ringattn::document_ids(cu);
  std::vector<ringattn::PackedShard> shards(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) {
    shards[r].positions = ringattn::shard_positions(*layout, cu.back(), world, r).materialize();
    for (const std::int64_t p : shards[r].positions) shards[r].documents.push_back(ids[static_cast<std::size_t>(p)]);
  }
  return shards;
}

}  // namespace

std::int32_t sequence_of(const std::vector<Prompt>& prompts, std::size_t i) {
  return prompts[i].sequence >= 0 ? prompts[i].sequence : static_cast<std::int32_t>(i);
}

int limit_of(const std::vector<Prompt>& prompts, const JobOptions& options, std::size_t i) {
  return prompts[i].max_tokens > 0 ? prompts[i].max_tokens : options.tokens;
}

BatchPlan plan_batch(const std::vector<Prompt>& prompts, const JobOptions& options, int rank, int world,
                     std::int64_t max_rows, bool kept) {
  // Checked alike on every rank (from the batch and the limits all share), before any call,
  // so that all fail together rather than some waiting on the others.
  BatchPlan plan;
  std::vector<std::size_t>& fresh = plan.fresh;
  std::vector<std::size_t>& follow = plan.follow;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const std::int32_t c = prompts[i].copy_of;
    if (c >= 0 && (static_cast<std::size_t>(c) >= i || prompts[static_cast<std::size_t>(c)].copy_of >= 0 || prompts[i].continues ||
                   prompts[i].tokens != prompts[static_cast<std::size_t>(c)].tokens))
      throw ringattn::InvalidArgument("prompt " + std::to_string(i) + " copies prompt " + std::to_string(c) +
                                      ", which must come before it, copy none, and hold the same tokens");
    (c >= 0 ? plan.copies : prompts[i].continues ? follow : fresh).push_back(i);
  }
  if (!follow.empty() && (!kept || !options.decode_rank))
    throw ringattn::InvalidArgument("prompt " + std::to_string(follow[0]) +
                                    " continues a kept sequence, which needs kept caches and a decode rank");
  std::int64_t fresh_tokens = 0;
  for (const std::size_t i : fresh) {
    if (prompts[i].tokens.empty()) throw ringattn::InvalidArgument("prompt " + std::to_string(i) + " has no token (BOS at least)");
    fresh_tokens += static_cast<std::int64_t>(prompts[i].tokens.size());
  }
  // A batch too short to cut (fewer prompt tokens than ranks: an empty prompt is BOS alone)
  // leaves some rank without a row, and a ring call needs one on every rank. Its prompts
  // are fed like follow-ups instead, from empty rows: the feeding rank (the decode rank, or
  // rank 0) sends their queries around the ring past the other ranks' empty caches and
  // appends their K/V where decode_store_rank puts them. The same attention, only routed
  // through Ring::decode.
  std::vector<Continuation>& fed_from = plan.fed_from;
  for (const std::size_t i : follow) fed_from.push_back(*prompts[i].continues);
  if (!fresh.empty() && fresh_tokens < world) {
    std::vector<std::size_t> all(follow.size() + fresh.size());
    std::merge(follow.begin(), follow.end(), fresh.begin(), fresh.end(), all.begin());
    fed_from.clear();
    for (const std::size_t i : all) fed_from.push_back(prompts[i].continues.value_or(Continuation{}));
    follow = std::move(all);
    fresh.clear();
  }
  std::vector<std::int64_t>& cu = plan.cu;
  cu = {0};
  std::vector<std::int32_t>& fresh_ids = plan.fresh_ids;
  for (const std::size_t i : fresh) {
    cu.push_back(cu.back() + static_cast<std::int64_t>(prompts[i].tokens.size()));
    fresh_ids.push_back(sequence_of(prompts, i));
    if (fresh_ids.size() > 1 && fresh_ids.back() <= fresh_ids[fresh_ids.size() - 2])
      throw ringattn::InvalidArgument("prompt " + std::to_string(i) + ": the sequence ids of the prefilled prompts must increase (" +
                                      std::to_string(fresh_ids[fresh_ids.size() - 2]) + " then " + std::to_string(fresh_ids.back()) + ")");
  }
  if (static_cast<std::int64_t>(prompts.size()) > max_rows)
    throw ringattn::InvalidArgument(std::to_string(prompts.size()) + " prompts, but one rank may own them all and a decode call carries at most " +
                                    std::to_string(max_rows) +
                                    " tokens per rank (max_rows): split the batch or raise RINGATTN_MAX_ROWS");
  std::int64_t follow_tokens = 0;
  for (const std::size_t i : follow) {
    if (prompts[i].tokens.empty()) throw ringattn::InvalidArgument("prompt " + std::to_string(i) + " continues its sequence with no token");
    follow_tokens += static_cast<std::int64_t>(prompts[i].tokens.size());
  }
  if (follow_tokens > max_rows)
    throw ringattn::InvalidArgument("the batch's follow-up messages hold " + std::to_string(follow_tokens) +
                                    " tokens, above the ring's max_rows " + std::to_string(max_rows) + " for one decode call");
  const int feeder = options.decode_rank.value_or(0);
  for (const std::size_t i : follow) {
    const auto n = static_cast<std::int64_t>(prompts[i].tokens.size());
    if (world > 1 && n >= world) {
      plan.follow_rows.emplace_back(n * rank / world, n * (rank + 1) / world);
      plan.follow_last.push_back(world - 1);
    } else {
      plan.follow_rows.emplace_back(0, rank == feeder ? n : 0);
      plan.follow_last.push_back(feeder);
    }
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) plan.steps = std::max(plan.steps, limit_of(prompts, options, i));
  std::vector<ringattn::PackedShard>& shards = plan.shards;
  if (!fresh.empty()) shards = shard_batch(cu, world, options.layout);
  for (std::size_t r = 0; r < shards.size(); ++r)
    if (static_cast<std::int64_t>(shards[r].positions.size()) > max_rows)
      throw ringattn::InvalidArgument("rank " + std::to_string(r) + " would hold " +
                                      std::to_string(shards[r].positions.size()) +
                                      " rows of the packed batch, above the ring's max_rows " +
                                      std::to_string(max_rows) + ": raise RINGATTN_MAX_ROWS or run more ranks");
  if (!shards.empty()) plan.shard = shards[static_cast<std::size_t>(rank)];
  const std::vector<std::int64_t>& positions = plan.shard.positions;
  const std::vector<std::int32_t>& documents = plan.shard.documents;
  const std::size_t rows = positions.size();
  plan.token_ids.resize(rows);
  plan.row_ids.resize(rows);
  plan.rope_pos.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int32_t d = documents[r];
    const std::int64_t in_prompt = positions[r] - cu[static_cast<std::size_t>(d)];
    plan.token_ids[r] = prompts[fresh[static_cast<std::size_t>(d)]].tokens[static_cast<std::size_t>(in_prompt)];
    plan.row_ids[r] = fresh_ids[static_cast<std::size_t>(d)];
    plan.rope_pos[r] = options.rope == RopePositions::global ? in_prompt : static_cast<std::int64_t>(r);
  }
  return plan;
}

}  // namespace infer
