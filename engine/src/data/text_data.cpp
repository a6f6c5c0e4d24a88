// Text data: the IMDb review folders (word tokens) and plain UTF-8 corpora (characters).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <unordered_map>

#include "data/data_util.h"
#include "devicerace/environment.h"
#include "devicerace/dataset.h"
#include "devicerace/errors.h"

namespace devicerace {

namespace fs = std::filesystem;

namespace {

// One review or one corpus file is read whole, within these bounds.
constexpr std::uint64_t kMaxReviewBytes = 1u << 20;
constexpr std::uint64_t kMaxCorpusBytes = 64u << 20;
constexpr std::size_t kMaxReviewsPerFolder = 200000;

std::vector<std::string> words(const std::string& text) {
    std::vector<std::string> out;
    std::string cur;
    for (std::size_t i = 0; i < text.size(); ++i) {
        // "<br />" separates paragraphs in the IMDb reviews.
        if (text.compare(i, 6, "<br />") == 0) {
            i += 5;
            if (!cur.empty()) {
                out.push_back(std::move(cur));
                cur.clear();
            }
            continue;
        }
        const auto c = static_cast<unsigned char>(text[i]);
        if (std::isalnum(c) || c == '\'' || c >= 0x80) {
            cur += static_cast<char>(std::tolower(c));
        } else if (!cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
        }
    }
    if (!cur.empty()) {
        out.push_back(std::move(cur));
    }
    return out;
}

struct Reviews {
    std::vector<std::vector<std::string>> texts;
    std::vector<std::int32_t> labels;
};

Reviews readReviews(const fs::path& split) {
    Reviews r;
    for (const auto& [sub, label] : {std::pair{"pos", 1}, std::pair{"neg", 0}}) {
        const auto dir = split / sub;
        detail::checkFolder(dir, "IMDb reviews (*.txt)");
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(dir)) {
            if (entry.is_regular_file() && entry.path().extension() == ".txt") {
                files.push_back(entry.path());
                if (files.size() > kMaxReviewsPerFolder) {
                    throw DataError(fmt::format("{}: more than {} reviews; not an IMDb folder?", dir.string(),
                                                kMaxReviewsPerFolder));
                }
            }
        }
        if (files.empty()) {
            throw DataError(fmt::format("{}: no *.txt reviews", dir.string()));
        }
        std::sort(files.begin(), files.end());
        for (const auto& f : files) {
            r.texts.push_back(words(detail::readFileBounded(f, kMaxReviewBytes)));
            r.labels.push_back(label);
        }
    }
    return r;
}

void encode(const Reviews& reviews, const std::unordered_map<std::string, std::int32_t>& ids, int maxlen,
            std::optional<std::int64_t> limit, DataSplit& split) {
    // Interleave positives and negatives so a --train-limit subset keeps both classes.
    const std::size_t n = reviews.texts.size();
    std::vector<std::size_t> order(n);
    std::size_t pos = 0, neg = 0;
    for (std::size_t i = 0; i < n; ++i) {
        pos += reviews.labels[i] == 1;
    }
    std::size_t pi = 0, ni = pos;
    for (std::size_t k = 0; k < n; ++k) {
        order[k] = (k % 2 == 0 && pi < pos) || ni >= n ? pi++ : ni++;
    }
    (void)neg;
    const auto count =
        static_cast<std::int64_t>(limit ? std::min<std::size_t>(n, static_cast<std::size_t>(*limit)) : n);
    split.count = count;
    split.shape = {maxlen};
    split.tokens.assign(static_cast<std::size_t>(count * maxlen), 0);
    for (std::int64_t k = 0; k < count; ++k) {
        const auto& text = reviews.texts[order[static_cast<std::size_t>(k)]];
        split.labels.push_back(reviews.labels[order[static_cast<std::size_t>(k)]]);
        // Keras pad_sequences: keep the last maxlen tokens, pad at the front.
        const std::size_t take = std::min<std::size_t>(text.size(), static_cast<std::size_t>(maxlen));
        const std::size_t offset = static_cast<std::size_t>(maxlen) - take;
        for (std::size_t j = 0; j < take; ++j) {
            auto it = ids.find(text[text.size() - take + j]);
            split.tokens[static_cast<std::size_t>(k * maxlen) + offset + j] = it == ids.end() ? 1 : it->second;
        }
    }
}

// Decodes UTF-8 into code points; throws naming the byte offset of the first invalid sequence.
std::vector<char32_t> decodeUtf8(const std::string& s, const fs::path& file) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || i + static_cast<std::size_t>(len) > s.size()) {
            throw DataError(fmt::format("{}: not UTF-8 text (invalid byte at offset {})", file.string(), i));
        }
        char32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int k = 1; k < len; ++k) {
            const auto cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
            if ((cc & 0xC0) != 0x80) {
                throw DataError(fmt::format("{}: not UTF-8 text (invalid byte at offset {})", file.string(), i));
            }
            cp = (cp << 6) | (cc & 0x3F);
        }
        out.push_back(cp);
        i += static_cast<std::size_t>(len);
    }
    return out;
}

std::string encodeUtf8(char32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
}

void windows(const std::vector<std::int32_t>& ids, std::size_t from, std::size_t to, int window, int stride,
             std::optional<std::int64_t> limit, DataSplit& split) {
    split.shape = {window};
    for (std::size_t i = from; i + static_cast<std::size_t>(window) < to; i += static_cast<std::size_t>(stride)) {
        if (limit && split.count >= *limit) {
            break;
        }
        split.tokens.insert(split.tokens.end(), ids.begin() + static_cast<std::ptrdiff_t>(i),
                            ids.begin() + static_cast<std::ptrdiff_t>(i) + window);
        split.labels.push_back(ids[i + static_cast<std::size_t>(window)]);
        ++split.count;
    }
}

} // namespace

std::shared_ptr<const Dataset> loadImdb(const fs::path& dirIn, int vocabulary, int maxlen,
                                        std::optional<std::int64_t> trainLimit, std::optional<std::int64_t> testLimit) {
    detail::checkFolder(dirIn, "the IMDb reviews (aclImdb with train/ and test/)");
    const fs::path dir = fs::exists(dirIn / "aclImdb") ? dirIn / "aclImdb" : dirIn;
    return detail::cachedLoad("imdb", dir, trainLimit, testLimit, fmt::format("{}/{}", vocabulary, maxlen), [&] {
        auto train = readReviews(dir / "train");
        auto test = readReviews(dir / "test");
        std::unordered_map<std::string, std::int64_t> freq;
        for (const auto& t : train.texts) {
            for (const auto& w : t) {
                ++freq[w];
            }
        }
        std::vector<std::pair<std::int64_t, std::string>> ranked;
        ranked.reserve(freq.size());
        for (auto& [w, n] : freq) {
            ranked.emplace_back(-n, w);
        }
        std::sort(ranked.begin(), ranked.end());
        std::unordered_map<std::string, std::int32_t> ids;
        auto ds = std::make_shared<Dataset>();
        ds->tokenText = {"<pad>", "<unk>"};
        for (std::size_t i = 0; i < ranked.size() && ids.size() + 2 < static_cast<std::size_t>(vocabulary); ++i) {
            ids.emplace(ranked[i].second, static_cast<std::int32_t>(ids.size() + 2));
            ds->tokenText.push_back(ranked[i].second);
        }
        ds->name = "IMDb";
        ds->source = dir.string();
        ds->kind = DataKind::Tokens;
        ds->classes = 2;
        ds->vocabulary = vocabulary;
        encode(train, ids, maxlen, trainLimit, ds->train);
        encode(test, ids, maxlen, testLimit, ds->test);
        return ds;
    });
}

fs::path defaultTextCorpus() {
    if (const char* env = devicerace::environmentSwitch("DEVICERACE_TEXT_CORPUS")) {
        return env;
    }
    return "/usr/share/games/fortunes";
}

std::shared_ptr<const Dataset> loadTextCorpus(const fs::path& path, int window, int stride,
                                              std::optional<std::int64_t> trainLimit,
                                              std::optional<std::int64_t> testLimit) {
    TextWindows w;
    w.length = window;
    w.stride = stride;
    return loadTextCorpus(path, w, trainLimit, testLimit);
}

std::shared_ptr<const Dataset> loadTextCorpus(const fs::path& path, const TextWindows& layout,
                                              std::optional<std::int64_t> trainLimit,
                                              std::optional<std::int64_t> testLimit) {
    const int window = layout.length;
    const int stride = layout.stride;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        throw DataError(fmt::format("{}: no such file or folder; expected a UTF-8 text corpus (Debian package "
                                    "fortunes-min, or --data-dir FILE)",
                                    path.string()));
    }
    const auto key = fmt::format("{}/{}/{}/{}", window, stride, layout.lowercase ? "lower" : "cased",
                                 fmt::join(layout.onlyFiles, ","));
    return detail::cachedLoad("text", path, trainLimit, testLimit, key, [&] {
        std::vector<fs::path> files;
        if (fs::is_directory(path)) {
            detail::checkFolder(path, "UTF-8 text files");
            for (const auto& e : fs::directory_iterator(path)) {
                // Plain files only: fortune's .dat indexes and .u8 links are not text.
                const bool wanted =
                    layout.onlyFiles.empty() || std::find(layout.onlyFiles.begin(), layout.onlyFiles.end(),
                                                          e.path().filename().string()) != layout.onlyFiles.end();
                if (wanted && e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") {
                    files.push_back(e.path());
                }
            }
            std::sort(files.begin(), files.end());
        } else {
            files.push_back(path);
        }
        std::vector<char32_t> text;
        std::uint64_t total = 0;
        for (const auto& f : files) {
            auto bytes = detail::readFileBounded(f, kMaxCorpusBytes - std::min(total, kMaxCorpusBytes - 1));
            total += bytes.size();
            auto cps = decodeUtf8(bytes, f);
            text.insert(text.end(), cps.begin(), cps.end());
        }
        // Keras lstm_text_generation lowercases its corpus: fewer classes, the same language.
        for (auto& c : text) {
            if (layout.lowercase && c < 0x80) {
                c = static_cast<char32_t>(std::tolower(static_cast<int>(c)));
            }
        }
        if (text.size() < static_cast<std::size_t>(window) * 20) {
            throw DataError(fmt::format("{}: {} characters is too little text for {}-character windows (need at "
                                        "least {})",
                                        path.string(), text.size(), window, window * 20));
        }
        std::set<char32_t> alphabet(text.begin(), text.end());
        std::map<char32_t, std::int32_t> index;
        auto ds = std::make_shared<Dataset>();
        for (char32_t c : alphabet) {
            index.emplace(c, static_cast<std::int32_t>(index.size()));
            ds->tokenText.push_back(encodeUtf8(c));
        }
        std::vector<std::int32_t> ids(text.size());
        for (std::size_t i = 0; i < text.size(); ++i) {
            ids[i] = index[text[i]];
        }
        ds->name = "text: " + path.string();
        ds->source = path.string();
        ds->kind = DataKind::Tokens;
        ds->vocabulary = static_cast<int>(alphabet.size());
        ds->classes = ds->vocabulary;
        const std::size_t split = text.size() * 9 / 10;
        windows(ids, 0, split, window, stride, trainLimit, ds->train);
        windows(ids, split, ids.size(), window, stride, testLimit, ds->test);
        return ds;
    });
}

} // namespace devicerace
