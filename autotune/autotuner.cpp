#include "autotune/autotuner.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "autotune/tuning_store.hpp"
#include "cache/file_lock.hpp"
#include "cache/posix_io.hpp"
#include "base/content_hash.hpp"

namespace flashjit::autotune {

namespace {

// Keeps per-key lock file names readable yet well under NAME_MAX (255): the key string is cut
// here and a hash of the whole key keeps names unique.
constexpr std::size_t kMaxLockKeyChars = 120;

std::string lock_name_part(const std::string& key) {
  std::string out;
  for (char c : key.substr(0, kMaxLockKeyChars)) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_' || c == '.';
    out += keep ? c : '_';
  }
  return out;
}

bool contains(const std::vector<Tiling>& tilings, const Tiling& t) {
  return std::find(tilings.begin(), tilings.end(), t) != tilings.end();
}

}  // namespace

struct Autotuner::State {
  TuneMode mode = TuneMode::offline_only;
  AutotunerOptions options;
  Logger logger;
  std::optional<TuningStore> store;

  // One remembered answer per key. A slot is created "not ready" by the caller that decides for
  // the key; callers arriving meanwhile wait for `settled`.
  struct Slot {
    bool ready = false;
    std::vector<Tiling> candidates;  // the question it answers: an engine asking with another
    Tiling default_tiling;           // candidate set or default gets a fresh decision
    Tiling tiling;
    bool tuned = false;  // a tuned result, not the default
  };
  std::mutex mutex;  // guards memo and stats
  std::condition_variable settled;
  std::unordered_map<TuningKey, std::shared_ptr<Slot>, TuningKeyHash> memo;
  AutotunerStats stats;

  std::mutex tune_mutex;  // one tuning run at a time: concurrent timings would disturb each other

  void log(const std::string& line) const {
    if (logger) logger(line);
  }
  void count(std::uint64_t AutotunerStats::*counter) {
    std::lock_guard<std::mutex> guard(mutex);
    ++(stats.*counter);
  }

  std::string key_lock_name(const TuningKey& key) const {
    std::string stem = cache::file_name(store->path());
    stem.resize(stem.size() - kTuningFileExtension.size());
    const std::string k = key.to_string();
    return stem + "--" + lock_name_part(k) + "-" + hash_hex(k).substr(0, 16) + ".lock";
  }

  // A current stored record whose tiling is one this caller could run.
  std::optional<TuningRecord> stored(const TuningKey& key, const std::string& hash,
                                     const std::vector<Tiling>& candidates, const Tiling& default_tiling) const {
    if (!store) return std::nullopt;
    auto r = store->find(key, hash);
    if (!r) return std::nullopt;
    if (r->tiling != default_tiling && !contains(candidates, r->tiling)) {
      log("stored tuning for " + key.to_string() + " chose " + r->tiling.name() +
          ", which is not among the candidates; ignoring it");
      return std::nullopt;
    }
    return r;
  }

  // Takes the key's cross-process lock, waiting up to the timeout; sets `waited` when another
  // process held it. Nullopt (logged) when it could not be had: tuning goes ahead without it.
  std::optional<cache::FileLock> lock_key(const TuningKey& key, bool& waited) const {
    const std::string name = key_lock_name(key);
    const std::string path = cache::join_path(store->locks_dir(), name);
    auto dir = store->open_locks_dir();
    if (!dir) {
      log("cannot lock " + path + " (" + dir.error().message() + "); tuning without it");
      return std::nullopt;
    }
    auto lock = cache::FileLock::try_acquire(*dir, name);
    if (lock && !lock->has_value()) {
      waited = true;
      log("waiting for another process tuning " + key.to_string());
      cache::LockWaitNotices notices;
      if (logger)
        notices.notify = [this, &key](const cache::LockWait& w) {
          log("lock wait: waited " + std::to_string(w.waited.count() / 1000) + " s for the process tuning " +
              key.to_string() + " ('" + w.path + "'), held by " + w.holder + "; tuning here too after " +
              std::to_string(w.timeout.count() / 1000) + " s");
        };
      lock = cache::FileLock::acquire_for(*dir, name, options.key_lock_timeout, notices);
      if (lock && !lock->has_value()) {
        log("gave up waiting for the other process tuning " + key.to_string() + "; tuning it here too");
        return std::nullopt;
      }
    }
    if (!lock) {
      log("cannot lock " + path + " (" + lock.error().message() + "); tuning without it");
      return std::nullopt;
    }
    return std::move(**lock);
  }

  struct Tuned {
    TuningRecord record;
    bool tuned_now = false;  // false: another process's result, found after waiting for it
    bool waited = false;
  };

  Result<Tuned> tune_and_store(const TuningKey& key, const std::vector<Tiling>& candidates,
                               const Tiling& default_tiling, const Measure& measure, const Prune& prune,
                               const std::string& hash, Retune retune) {
    Tuned out;
    std::optional<cache::FileLock> key_lock;
    if (store) {
      key_lock = lock_key(key, out.waited);
      if (retune == Retune::if_missing) {
        // Whoever held the lock before us may have stored this key meanwhile.
        if (Status st = store->reload(); !st) log("cannot re-read the tuning store: " + st.error().message());
        if (auto r = stored(key, hash, candidates, default_tiling)) {
          out.record = std::move(*r);
          return out;
        }
      }
    }
    std::lock_guard<std::mutex> one_at_a_time(tune_mutex);
    log("tuning " + key.to_string() + ": " + std::to_string(candidates.size()) + " candidate tilings");
    auto outcome = tune(candidates, default_tiling, measure, prune, options.progress, logger, options.tune);
    {
      std::lock_guard<std::mutex> guard(mutex);
      ++(outcome ? stats.tunes : stats.tune_failures);
    }
    if (!outcome) return std::move(outcome).error().with("key", key.to_string());
    {
      std::lock_guard<std::mutex> guard(mutex);
      stats.tune_seconds += outcome->elapsed_s;
    }
    out.record = outcome->to_record(hash);
    out.tuned_now = true;
    if (store) {
      out.record.nvrtc_version = options.nvrtc_version;  // as put() stamps the stored copy
      out.record.driver_version = options.driver_version;
      if (Status st = store->put(key, out.record); !st) {
        log("cannot store the tuning of " + key.to_string() + ": " + st.error().message());
        count(&AutotunerStats::store_failures);
      }
    }
    return out;
  }

  struct Decision {
    Tiling tiling;
    bool tuned = false;      // a tuned result rather than the default
    bool tuned_now = false;  // tuned by this call
    bool waited = false;
  };

  Decision decide(const TuningKey& key, const std::vector<Tiling>& candidates, const Tiling& default_tiling,
                  const Measure& measure, const Prune& prune) {
    const std::string hash = candidate_set_hash(candidates, options.candidate_salt);
    if (auto r = stored(key, hash, candidates, default_tiling)) return {r->tiling, true, false, false};
    if (mode != TuneMode::on_first_use) return {default_tiling, false, false, false};
    auto t = tune_and_store(key, candidates, default_tiling, measure, prune, hash, Retune::if_missing);
    if (!t) {
      log("tuning " + key.to_string() + " failed, using the default " + default_tiling.name() + ": " +
          t.error().message());
      return {default_tiling, false, false, false};
    }
    return {t->record.tiling, true, t->tuned_now, t->waited};
  }
};

Autotuner::Autotuner(std::unique_ptr<State> state) : s_(std::move(state)) {}
Autotuner::Autotuner(Autotuner&&) noexcept = default;
Autotuner& Autotuner::operator=(Autotuner&&) noexcept = default;
Autotuner::~Autotuner() = default;

Result<Autotuner> Autotuner::create(AutotunerOptions options) {
  auto s = std::make_unique<State>();
  s->logger = options.logger ? serialized_logger(std::move(options.logger)) : default_logger();
  s->mode = options.mode ? *options.mode : tune_mode_from_env(TuneMode::offline_only, s->logger);
  s->options = std::move(options);
  if (s->mode != TuneMode::off) {
    auto store = TuningStore::open(s->options.root, s->options.device_name, s->options.arch,
                                   s->options.nvrtc_version, s->options.driver_version, s->logger,
                                   s->options.knob_tables);
    if (store) s->store.emplace(std::move(store).value());
    else s->log("tuning results will not be kept on disk: " + store.error().message());
  }
  return Autotuner(std::move(s));
}

Result<Tiling> Autotuner::choose(const TuningKey& key, const std::vector<Tiling>& candidates,
                                 const Tiling& default_tiling, const Measure& measure, const Prune& prune) {
  State& s = *s_;
  using Slot = State::Slot;
  std::shared_ptr<Slot> slot;
  {
    std::unique_lock<std::mutex> guard(s.mutex);
    ++s.stats.lookups;
    if (s.mode == TuneMode::off) {
      ++s.stats.defaults;
      return default_tiling;
    }
    bool waited = false;
    for (;;) {
      auto it = s.memo.find(key);
      if (it == s.memo.end()) break;
      const Slot& known = *it->second;
      if (!known.ready) {
        if (!waited) ++s.stats.waits;
        waited = true;
        s.settled.wait(guard);
        continue;  // look again: the slot may have been replaced or dropped
      }
      if (known.candidates == candidates && known.default_tiling == default_tiling) {
        ++(known.tuned ? s.stats.hits : s.stats.defaults);
        return known.tiling;
      }
      break;  // another candidate set: decide afresh
    }
    slot = std::make_shared<Slot>();
    slot->candidates = candidates;
    slot->default_tiling = default_tiling;
    s.memo[key] = slot;
  }

  // Should a callback throw, drop the unfinished slot so that waiters decide for themselves
  // instead of waiting forever.
  struct DropUnfinished {
    State& s;
    const TuningKey& key;
    const std::shared_ptr<Slot>& slot;
    bool finished = false;
    ~DropUnfinished() {
      if (finished) return;
      {
        std::lock_guard<std::mutex> guard(s.mutex);
        auto it = s.memo.find(key);
        if (it != s.memo.end() && it->second == slot) s.memo.erase(it);
      }
      s.settled.notify_all();
    }
  } drop{s, key, slot};

  const State::Decision d = s.decide(key, candidates, default_tiling, measure, prune);
  {
    std::lock_guard<std::mutex> guard(s.mutex);
    slot->tiling = d.tiling;
    slot->tuned = d.tuned;
    slot->ready = true;
    if (d.waited) ++s.stats.waits;
    if (!d.tuned) ++s.stats.defaults;
    else if (!d.tuned_now) ++s.stats.hits;
  }
  drop.finished = true;
  s.settled.notify_all();
  return d.tiling;
}

std::optional<Tiling> Autotuner::known_default(const TuningKey& key, const Tiling& default_tiling) {
  State& s = *s_;
  std::lock_guard<std::mutex> guard(s.mutex);
  const bool defaults_only =
      s.mode == TuneMode::off ||
      (s.mode == TuneMode::offline_only && !s.memo.count(key) && !(s.store && s.store->has(key)));
  if (!defaults_only) return std::nullopt;
  ++s.stats.lookups;
  ++s.stats.defaults;
  return default_tiling;
}

Result<TuningRecord> Autotuner::tune_key(const TuningKey& key, const std::vector<Tiling>& candidates,
                                         const Tiling& default_tiling, const Measure& measure, const Prune& prune,
                                         Retune retune) {
  State& s = *s_;
  const std::string hash = candidate_set_hash(candidates, s.options.candidate_salt);
  if (retune == Retune::if_missing)
    if (auto r = s.stored(key, hash, candidates, default_tiling)) return std::move(*r);
  auto t = s.tune_and_store(key, candidates, default_tiling, measure, prune, hash, retune);
  if (!t) return std::move(t).error();
  {
    // choose() answers from here on with the new result.
    std::lock_guard<std::mutex> guard(s.mutex);
    auto slot = std::make_shared<State::Slot>();
    slot->ready = true;
    slot->candidates = candidates;
    slot->default_tiling = default_tiling;
    slot->tiling = t->record.tiling;
    slot->tuned = true;
    auto it = s.memo.find(key);
    if (it == s.memo.end() || it->second->ready) s.memo[key] = slot;  // never replace one being decided
  }
  return std::move(t->record);
}

TuneMode Autotuner::mode() const { return s_->mode; }
bool Autotuner::has_store() const { return s_->store.has_value(); }
std::string Autotuner::store_path() const { return s_->store ? s_->store->path() : std::string(); }

AutotunerStats Autotuner::stats() const {
  std::lock_guard<std::mutex> guard(s_->mutex);
  return s_->stats;
}

}  // namespace flashjit::autotune
