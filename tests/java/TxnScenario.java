// A transactional KafkaProducer (commit, abort, a fenced zombie) read back by
// read_committed and read_uncommitted consumers, and the Admin views of KIP-664
// (listTransactions, describeTransactions, describeProducers). Prints the producer epoch
// the coordinator holds after initTransactions, the commit and the abort (transaction
// version 2 bumps it at every end, version 1 does not) and the group offset the first
// transaction committed with sendOffsetsToTransaction.
// Usage: TxnScenario BOOTSTRAP TOPIC
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnScenario {
    static KafkaProducer<String, String> producer(String bootstrap, String tid) {
        Properties p = Check.props(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, tid);
        return new KafkaProducer<>(p);
    }

    static List<String> read(String bootstrap, String topic, String level, int want) {
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level);
        List<String> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(p)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 15000;
            while (out.size() < want && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    out.add(r.value());
                }
            }
            Check.out("position " + level + " " + c.position(tp));
        }
        return out;
    }

    static int epoch(String bootstrap, String tid) throws Exception {
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            return admin.describeTransactions(List.of(tid)).description(tid).get().producerEpoch();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        TopicPartition tp0 = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> p = producer(bootstrap, "java-tx")) {
            p.initTransactions();
            int e0 = epoch(bootstrap, "java-tx");
            p.beginTransaction();
            for (int i = 0; i < 5; i++) {
                p.send(new ProducerRecord<>(topic, 0, "k", "c-" + i));
            }
            p.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(5)),
                    new ConsumerGroupMetadata("java-tx-group"));
            p.commitTransaction();
            int e1 = epoch(bootstrap, "java-tx");
            p.beginTransaction();
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(topic, 0, "k", "a-" + i));
            }
            p.flush();
            p.abortTransaction();
            int e2 = epoch(bootstrap, "java-tx");
            Check.out("epochs " + (e1 - e0) + "," + (e2 - e0));
            try (Admin admin = Admin.create(Check.props(bootstrap))) {
                Map<TopicPartition, OffsetAndMetadata> offsets = admin
                        .listConsumerGroupOffsets("java-tx-group").partitionsToOffsetAndMetadata().get();
                Check.out("group offset " + offsets.get(tp0).offset());
            }
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "open")).get();
            try (Admin admin = Admin.create(Check.props(bootstrap))) {
                Collection<TransactionListing> listed = admin.listTransactions().all().get();
                Check.out("listed " + listed.size() + " " + listed.iterator().next().state());
                TransactionDescription d = admin.describeTransactions(List.of("java-tx"))
                        .description("java-tx").get();
                Check.out("described " + d.state() + " " + d.topicPartitions());
                DescribeProducersResult dp = admin.describeProducers(List.of(new TopicPartition(topic, 0)));
                List<ProducerState> states = dp.partitionResult(new TopicPartition(topic, 0)).get().activeProducers();
                Check.out("producers " + states.size() + " txnStart=" + states.get(0).currentTransactionStartOffset().orElse(-1L));
            }
            // A second instance fences this one; the open transaction is aborted.
            try (KafkaProducer<String, String> p2 = producer(bootstrap, "java-tx")) {
                p2.initTransactions();
                p2.beginTransaction();
                p2.send(new ProducerRecord<>(topic, 0, "k", "new"));
                p2.commitTransaction();
            }
            try {
                p.commitTransaction();
                Check.that(false, "the zombie committed");
            } catch (ProducerFencedException e) {
                Check.out("fenced");
            }
        }
        List<String> committed = read(bootstrap, topic, "read_committed", 6);
        Check.out("read_committed " + String.join(",", committed));
        List<String> uncommitted = read(bootstrap, topic, "read_uncommitted", 10);
        Check.out("read_uncommitted " + String.join(",", uncommitted));
        Check.out("OK txn");
    }
}
