#pragma once
/// Data as loaded from disk (bytes and token ids, not tensors), shared read-only between
/// lanes. Thread-safe after construction.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace devicerace {

enum class DataKind {
    Images, // uint8 pixels, NCHW
    Tokens  // int32 token ids, N x T
};

struct DataSplit {
    std::int64_t count = 0;
    std::vector<std::int64_t> shape;  // one example: {C, H, W} for images, {T} for tokens
    std::vector<std::uint8_t> pixels; // Images: count * prod(shape)
    std::vector<std::int32_t> tokens; // Tokens: count * prod(shape)
    std::vector<std::int32_t> labels; // count
    std::int64_t exampleSize() const;
};

struct Dataset {
    std::string name;   // "Fashion-MNIST", "CIFAR-10", "IMDb", "text: /usr/share/games/fortunes/fortunes"
    std::string source; // folder or file it came from, or "synthetic"
    bool synthetic = false;
    DataKind kind = DataKind::Images;
    int classes = 10;                   // label values 0..classes-1
    int vocabulary = 0;                 // Tokens: ids 0..vocabulary-1
    std::vector<std::string> tokenText; // Tokens: the text of each id (charlstm decodes samples)
    std::vector<float> mean, stddev;    // Images: per-channel normalisation after /255 (empty: none)
    DataSplit train, test;
};

/// Ready messages and recordings list each token's text up to this many ids: a text's alphabet,
/// never IMDb's 20,000 words.
inline constexpr std::size_t kListedTokenTexts = 4096;

/// Kept for the engine's first users.
using ImageDataset = Dataset;

/// Default folder of Fashion-MNIST (the Debian package dataset-fashion-mnist).
std::filesystem::path defaultFashionMnistDir();

/// Loads Fashion-MNIST/MNIST IDX files (train-images-idx3-ubyte[.gz], ...) from `dir`,
/// keeping the train/test split as shipped. `trainLimit`/`testLimit` keep only the first N.
/// Results are cached per (dir, limits). Throws DataError.
std::shared_ptr<const Dataset> loadFashionMnist(const std::filesystem::path& dir,
                                                std::optional<std::int64_t> trainLimit = {},
                                                std::optional<std::int64_t> testLimit = {});

/// Loads the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin) from `dir`.
/// Every record is 1 label byte + 3072 pixel bytes; sizes, labels and presence are checked.
std::shared_ptr<const Dataset> loadCifar10(const std::filesystem::path& dir,
                                           std::optional<std::int64_t> trainLimit = {},
                                           std::optional<std::int64_t> testLimit = {});

/// Loads the IMDb review folders (aclImdb: train/{pos,neg}/*.txt, test/{pos,neg}/*.txt),
/// keeping the `vocabulary` most frequent words of the training set (ids 2.., 0 = padding,
/// 1 = out of vocabulary) and the last `maxlen` tokens of each review.
std::shared_ptr<const Dataset> loadImdb(const std::filesystem::path& dir, int vocabulary, int maxlen,
                                        std::optional<std::int64_t> trainLimit = {},
                                        std::optional<std::int64_t> testLimit = {});

/// How a text corpus is cut into examples.
struct TextWindows {
    int length = 40;       // characters per example (charlstm: 40 that predict the next; a
                           // language model: context + 1, the targets being the inputs shifted by one)
    int stride = 3;        // a new example starts every `stride` characters
    bool lowercase = true; // ASCII letters folded to lower case (the Keras example does)
    // A folder: only these files of it (empty: every regular file).
    std::vector<std::string> onlyFiles;
};
/// Character windows of a UTF-8 text corpus (a file, or the regular files of a folder): the
/// label of each window is the character after it; the last 10% of the text is the test split.
std::shared_ptr<const Dataset> loadTextCorpus(const std::filesystem::path& path, const TextWindows& windows,
                                              std::optional<std::int64_t> trainLimit = {},
                                              std::optional<std::int64_t> testLimit = {});
/// charlstm's windows: `window` characters predict the next, one every `stride`, lower-cased.
std::shared_ptr<const Dataset> loadTextCorpus(const std::filesystem::path& path, int window, int stride,
                                              std::optional<std::int64_t> trainLimit = {},
                                              std::optional<std::int64_t> testLimit = {});
/// The corpus the text workloads use when none is given: the fortune cookies of the Debian
/// packages fortunes-min and fortunes (/usr/share/games/fortunes, or $DEVICERACE_TEXT_CORPUS).
std::filesystem::path defaultTextCorpus();

/// Shape-only description of synthetic data (generated later on the lane's device).
std::shared_ptr<const Dataset> syntheticDataset(DataKind kind, std::vector<std::int64_t> shape, int classes,
                                                int vocabulary, std::int64_t trainCount, std::int64_t testCount);
/// The Fashion-MNIST-shaped synthetic set.
std::shared_ptr<const Dataset> syntheticFashionMnist(std::optional<std::int64_t> trainLimit = {},
                                                     std::optional<std::int64_t> testLimit = {});

} // namespace devicerace
